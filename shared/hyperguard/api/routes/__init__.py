"""The API's routes, one powertools Router per resource; `create_app` includes them all."""
