"""`lb` subcommands: each module exposes ``register(subparsers)``."""
