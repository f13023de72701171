"""The documentation site builds with ``mkdocs build --strict``: no missing page, broken link or
anchor, page left out of the navigation, or docstring the API reference cannot read."""

import ast
import dataclasses
import doctest
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    # Installed by the test extra, so CI always runs this; a GPU machine without it skips.
    pytest.importorskip("mkdocs", reason="the docs tools (pip install -e '.[docs]') are absent")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    api = (site / "api" / "index.html").read_text()
    assert "Make a numba CUDA kernel tune its compile-time parameters" in api  # a docstring
    assert "Parameters:" in api and not re.search(r":(class|func|meth|attr|mod):`", api)
    # The home page includes README.md's quickstart itself, not the include line.
    home = (site / "index.html").read_text()
    assert "fastest" in home and "--8&lt;--" not in home
    # Raw data stays out of the site: its only JSON is the search index mkdocs makes.
    assert [path.relative_to(site) for path in site.rglob("*.json")] == [
        Path("search/search_index.json")
    ]


def _readme_quickstart() -> str:
    """The first ``python`` code block after README.md's "## Quickstart" heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Quickstart\n", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def test_the_readme_quickstart_runs_as_written_outside_the_repository(tmp_path):
    # Written to a file and run from a directory outside the repository, in a fresh process
    # that chooses for itself between a GPU and numba's simulator, as a user's would.
    script = tmp_path / "quick.py"
    script.write_text(_readme_quickstart())
    environment = {
        name: value for name, value in os.environ.items() if name != "NUMBA_ENABLE_CUDASIM"
    }
    environment["NUMBATUNE_CACHE_DIR"] = str(tmp_path / "cache")
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # It prints the winner, then the variants from the fastest, each with its median time.
    best_line, *time_lines = done.stdout.splitlines()
    assert best_line.startswith("best: ")
    best = ast.literal_eval(best_line.removeprefix("best: "))
    timed = [ast.literal_eval(line.strip().rsplit(": ", 1)[0]) for line in time_lines]
    assert all(line.endswith(" us") for line in time_lines)
    assert sorted(entry["BLOCK"] for entry in timed) == [64, 128, 256]
    assert timed[0] == best


def _user_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


#: A fenced code block: its indentation (a block inside a list item), language and body.
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<language>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    flags=re.MULTILINE | re.DOTALL,
)
#: The line before a block that runs only with a GPU.
_GPU_ONLY = "<!-- gpu-only -->"


@dataclasses.dataclass(frozen=True)
class _Block:
    """One fenced code block of a page."""

    line: int
    language: str
    code: str
    gpu_only: bool


def _blocks(page: Path) -> list[_Block]:
    text = page.read_text()
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        blocks.append(
            _Block(
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group("language"),
                code=textwrap.dedent(match.group("body")),
                gpu_only=before == _GPU_ONLY,
            )
        )
    return blocks


def _pages_with_code() -> list[Path]:
    return [page for page in _user_pages() if page.name != "CHANGELOG.md"]


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_code_block_names_its_language(page):
    unnamed = [block.line for block in _blocks(page) if not block.language]
    assert not unnamed, f"{page.name}: blocks at lines {unnamed} name no language (python, text...)"


def _imports_numbatune_before_numba(code: str) -> bool:
    """Whether the first import of numba (or numba-cuda) in ``code`` follows one of numbatune
    (which, without a GPU, must turn numba's simulator on before numba is imported)."""
    for node in ast.walk(ast.parse(code)):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            top = name.split(".")[0]
            if top == "numbatune":
                return True
            if top.startswith("numba"):
                return False
    return True


def _python_pages() -> list[Path]:
    return [
        page
        for page in _pages_with_code()
        if any(block.language == "python" for block in _blocks(page))
    ]


@pytest.mark.parametrize("page", _python_pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_python_blocks_of_each_page_run_in_order_as_written(page, tmp_path, monkeypatch):
    # As a reader pastes them into one session: in order, in one namespace, from a directory
    # of their own, with the suite's fresh tune cache. A block marked gpu-only runs on a GPU.
    import numbatune
    from numbatune.arrays import SIMULATOR

    blocks = [block for block in _blocks(page) if block.language == "python"]
    code = "\n".join(block.code for block in blocks)
    assert _imports_numbatune_before_numba(code), f"{page.name} imports numba before numbatune"
    if "numba_cuda_mlir" in code:  # (the mlir extra; a GPU machine may not have it)
        pytest.importorskip("numba_cuda_mlir", reason=f"{page.name} needs numba-cuda-mlir")
    monkeypatch.chdir(tmp_path)
    settings = numbatune.settings.snapshot()  # a page may configure numbatune: undone after
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        for block in blocks:
            if not (block.gpu_only and SIMULATOR):
                where = f"{page.name}, the block at line {block.line}"
                exec(compile(block.code, where, "exec"), namespace)
    finally:
        numbatune.wait_for_background_tuning()
        numbatune.configure(
            **{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        )


def test_the_block_reader_sees_languages_indented_blocks_and_the_gpu_marker(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n- item\n\n  ```bash\n  ls\n  ```\n\n"
        f"{_GPU_ONLY}\n```python\ny = x\n```\n\n```\nplain\n```\n"
    )
    assert _blocks(page) == [
        _Block(3, "python", "x = 1\n", False),
        _Block(9, "bash", "ls\n", False),
        _Block(14, "python", "y = x\n", True),
        _Block(18, "", "plain\n", False),
    ]
    assert _imports_numbatune_before_numba("import numbatune as nt\nfrom numba import cuda")
    assert not _imports_numbatune_before_numba("import numba.cuda\nimport numbatune")


def _strip_code(markdown: str) -> str:
    """The prose of a Markdown text: fenced blocks and inline code removed."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", markdown)


#: Traces of the project's working notes that a reader cannot use: a run named by its letter
#: ("run O", "runs J and K"), a machine's loan, a reference to an issue by number.
_NOTEBOOK_TRACES = {
    "a run letter": re.compile(r"\b[Rr]uns? [A-Z]\b"),
    "a machine loan": re.compile(r"\b[Ll]oans?\b"),
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+"),
}


@pytest.mark.parametrize("page", _user_pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_user_pages_hold_no_run_letters_loans_or_issue_numbers(page):
    prose = _strip_code(page.read_text())
    found = [
        f"{what}: {match.group(0)!r}"
        for what, pattern in _NOTEBOOK_TRACES.items()
        for match in pattern.finditer(prose)
    ]
    assert not found, found


def test_the_notebook_check_catches_what_it_names():
    text = "In run O of section 7, runs J and K on a fast loan (issue 21), `run X` in code."
    prose = _strip_code(text)
    assert [bool(pattern.search(prose)) for pattern in _NOTEBOOK_TRACES.values()] == [True] * 3
    assert not any(
        pattern.search("Run it: the runs of one key. A loaner? No issues.")
        for pattern in _NOTEBOOK_TRACES.values()
    )


def test_raw_results_live_in_bench_not_in_docs():
    assert not [path for path in (ROOT / "docs").rglob("*") if path.suffix == ".json"]
    results = ROOT / "bench" / "results"
    index = (results / "README.md").read_text()
    stored = {str(path.relative_to(results)) for path in results.rglob("*.json")}
    indexed = set(re.findall(r"^\| `([^`]+\.json)` \|", index, flags=re.MULTILINE))
    assert stored and stored == indexed


def test_relative_links_of_the_top_level_pages_lead_to_files():
    for page in (ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench/results/README.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _strip_code(page.read_text())):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name}: {target}"


def _docstring_sections(docstring: str) -> dict[str, list[str]]:
    """A numpy-style docstring's sections, title -> lines (the text before them under "")."""
    lines = inspect.cleandoc(docstring).splitlines()
    sections: dict[str, list[str]] = {"": []}
    title, index = "", 0
    while index < len(lines):
        underline = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if lines[index].strip() and len(underline) >= 3 and set(underline) == {"-"}:
            title, index = lines[index].strip(), index + 2
            sections[title] = []
            continue
        sections[title].append(lines[index])
        index += 1
    return sections


def _parameter_entries(docstring: str) -> dict[str, str]:
    """Each parameter a docstring's Parameters section documents -> its description."""
    entries: dict[str, str] = {}
    names: list[str] = []
    for line in _docstring_sections(docstring).get("Parameters", []):
        if line and not line.startswith(" "):
            names = [part.strip().lstrip("*") for part in line.split(" : ")[0].split(",")]
            entries.update(dict.fromkeys(names, ""))
        else:
            for name in names:
                entries[name] += line.strip() + " "
    return entries


def _public_api() -> list[tuple[str, Any]]:
    """The functions, classes and methods of the public API whose parameters users pass."""
    import numbatune
    import numbatune.testing

    exported = {name: getattr(numbatune, name) for name in numbatune.__all__}
    device_functions = {  # numba device functions, such as nonnegative
        name
        for name, value in exported.items()
        if not isinstance(value, type) and hasattr(value, "py_func")
    }
    functions = [
        (f"numbatune.{name}", value)
        for name, value in exported.items()
        if inspect.isfunction(value) or name in device_functions
    ]
    members = [
        "Variant",
        "Variant.priority_for",
        "Budget",
        "Budget.parse",
        "Strategy.for_space",
        "Check",
        "Check.tolerance",
        "TuneReport.fastest",
        "TunedKernel.tune",
        "TunedKernel.best",
        "TunedKernel.run_variant",
        "TunedKernel.with_variants",
    ]
    for path in members:
        found: Any = numbatune
        for part in path.split("."):
            found = getattr(found, part)
        functions.append((f"numbatune.{path}", found))
    functions += [
        (f"numbatune.testing.{name}", getattr(numbatune.testing, name))
        for name in dir(numbatune.testing)
        if not name.startswith("_")
        and inspect.isfunction(getattr(numbatune.testing, name))
        and getattr(numbatune.testing, name).__module__ == "numbatune.testing"
    ]
    return functions


@pytest.mark.parametrize(
    "path, api", _public_api(), ids=lambda value: value if isinstance(value, str) else ""
)
def test_every_parameter_of_the_public_api_is_documented(path, api):
    function = getattr(api, "py_func", api)
    parameters = [
        name for name in inspect.signature(function).parameters if name not in ("self", "cls")
    ]
    documented = _parameter_entries(api.__doc__ or "")
    assert set(parameters) <= set(documented), (
        f"{path}: parameters {sorted(set(parameters) - set(documented))} are not in its "
        "docstring's Parameters section"
    )
    assert set(documented) <= set(parameters), f"{path}: documents {sorted(documented)}"
    assert all(documented.values()), f"{path}: a parameter without a description"


def test_autotune_documents_every_search_strategy():
    import numbatune

    search = _parameter_entries(numbatune.autotune.__doc__)["search"]
    assert all(f'``"{strategy.value}"``' in search for strategy in numbatune.Strategy)


def test_the_api_examples_give_what_they_show():
    import numbatune

    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner()
    examples = [
        test
        for path, api in _public_api()
        for test in finder.find(getattr(api, "py_func", api), path, globs=dict(vars(numbatune)))
        if test.examples
    ]
    assert len(examples) >= 4  # Variant, product, Budget, anchor
    for test in examples:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
