"""Build hook for the compiled modules; everything else is in pyproject.toml.

Three modules are C: ``annal.storage._walker`` (the leader's record walker),
``annal.storage._columns`` (fetched records as column buffers, for Arrow) and
``annal.storage._encoder`` (a batch's records section, for producers).  They
are optional: where no compiler is found the install goes on and
``annal.storage.walker``, ``annal.storage.columns`` and
``annal.storage.records`` fall back to their pure-Python twins.
"""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall", "-Werror=implicit-function-declaration"]

setup(
    ext_modules=[
        Extension(
            "annal.storage._walker",
            ["storage/_walker.c"],
            depends=["storage/_readers.h"],
            optional=True,
            extra_compile_args=FLAGS,
        ),
        Extension(
            "annal.storage._columns",
            ["storage/_columns.c"],
            depends=["storage/_readers.h"],
            optional=True,
            extra_compile_args=FLAGS,
        ),
        Extension(
            "annal.storage._encoder",
            ["storage/_encoder.c"],
            optional=True,
            extra_compile_args=FLAGS,
        ),
    ]
)
