"""`hostgap` verbs of this stage (registered by ``register``)."""

import click


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
