"""The project's version: ``lb --version``, the HTTP API's OpenAPI document and the package.

The one place it is written; ``pyproject.toml`` reads it from here
(``[tool.setuptools.dynamic]``).
"""

VERSION = "2.0.0"
