"""Build hook for the one compiled module; everything else is in pyproject.toml.

``annal.storage._walker`` (the leader's record walker) is C.  It is optional:
where no compiler is found the install goes on and ``annal.storage.walker``
falls back to its pure-Python twin.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "annal.storage._walker",
            ["storage/_walker.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"],
        )
    ]
)
