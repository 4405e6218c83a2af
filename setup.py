"""Only one thing pyproject.toml cannot say: the wheel carries the top-level search_spaces/
(the project's layout) inside the package, as ipu_autotune/search_spaces/*.toml, where
`ipu_autotune.search.space.builtin_space_dir` finds them once installed."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithSearchSpaces(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib, "ipu_autotune", "search_spaces")
        target.mkdir(parents=True, exist_ok=True)
        for toml in sorted(Path(__file__).parent.joinpath("search_spaces").glob("*.toml")):
            self.copy_file(str(toml), str(target / toml.name))


setup(cmdclass={"build_py": BuildWithSearchSpaces})
