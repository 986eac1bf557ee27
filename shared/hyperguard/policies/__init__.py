"""The cluster's policies as data: the pydantic shapes the API validates and TeamsTable stores
(the repair policy, the burst policy), with their pure helpers.

Below both the data layer and the logic: `hyperguard.store` keeps them and the logic reads
them, so they import only `hyperguard.models`, `hyperguard.catalogue` and
`hyperguard.planning`'s published figures (D110).
"""
