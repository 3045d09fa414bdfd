"""The compiled Kineto column decoder (``hostgap.readers._kcolumns``, vendored yyjson), built when a
C compiler is there. Without one the install still succeeds and the loader uses its pure-Python
path (same results, slower): see docs/input.md, "The compiled decoder"."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the extension when possible; otherwise say so once and install without it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # no compiler, no Python headers
            self._skip(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:
            self._skip(e)

    @staticmethod
    def _skip(e: Exception) -> None:
        print(f"hostgap: note: the compiled Kineto decoder was not built ({e}); "
              "the pure-Python decoder will be used", flush=True)


setup(
    ext_modules=[
        Extension(
            "hostgap.readers._kcolumns",
            sources=["src/hostgap/readers/_kcolumns.c", "src/hostgap/readers/_yyjson/yyjson.c"],
            depends=["src/hostgap/readers/_yyjson/yyjson.h"],
            # portable build: no -march; yyjson without its writer and helpers (unused here)
            define_macros=[("YYJSON_DISABLE_WRITER", "1"), ("YYJSON_DISABLE_UTILS", "1"),
                           ("YYJSON_DISABLE_NON_STANDARD", "1")],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
