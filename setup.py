"""
Builds kafkatw's optional compiled accelerator for the record codec
(kafkatw/protocol/_speedups.c); setup.cfg holds the metadata.

The extension is optional: without a C compiler or Python's headers the build
says so and kafkatw installs without it, and kafkatw.protocol.records uses its
pure-Python loops (docs/design.md, "Compiled accelerator").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkatw.protocol._speedups",
            ["kafkatw/protocol/_speedups.c"],
            optional=True,
        )
    ]
)
