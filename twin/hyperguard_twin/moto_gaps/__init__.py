"""Where moto differs from AWS in a way the stack would notice: each AWS service's gaps,
closed in this process before the emulator serves (`hyperguard_twin.emulator`)."""
