"""The local twin: HyperGuard on an embedded AWS emulator (moto). Never imported by a Lambda."""
