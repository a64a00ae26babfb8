"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs on its own, in a fresh namespace, with a new empty temporary directory as the
working directory: a block makes its own data (`pixelpipe.tools.datasets.synthetic(n)`, or a
small folder it writes) and imports what it uses. Keep blocks fast (a few seconds on 2 cores).

A block that cannot run everywhere says so in a comment on its first line, and is skipped
where it cannot run:

    # needs CUDA                    skipped without a CUDA device
    # needs torchvision             skipped when the module is not installed (any module names,
    # needs CUDA, nvidia.dali       comma-separated, CUDA among them or not)

Text that is not meant to run (command output, fragments, another library's code) is fenced as
something other than python (```text, ```bash, ```py for a fragment).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

import pixelpipe as pp

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NEEDS = re.compile(r"#\s*needs\s+(.+)$")


def _blocks() -> list:
    params = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 2  # the block's first line of code
            name = f"{page.relative_to(ROOT).as_posix()}:{line}"
            params.append(pytest.param(name, m.group(1), id=name))
    return params


def _missing(code: str) -> str | None:
    """Why the block cannot run here (its first line's `# needs ...`), or None."""
    first = code.lstrip().split("\n", 1)[0]
    m = NEEDS.match(first)
    if not m:
        return None
    for need in (n.strip() for n in m.group(1).split(",")):
        if need.lower() == "cuda":
            if not torch.cuda.is_available():
                return "needs CUDA"
        elif importlib.util.find_spec(need.split(".")[0]) is None or importlib.util.find_spec(need) is None:
            return f"needs {need}"
    return None


@pytest.mark.parametrize(("name", "code"), _blocks())
def test_snippet_runs(name: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    why = _missing(code)
    if why:
        pytest.skip(why)
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    exec(compile(code, name, "exec"), namespace)  # running the docs is the test
    for value in list(namespace.values()):  # stop the threads of pipelines a block left open
        if isinstance(value, pp.Pipeline):
            value.close()


def test_snippets_found() -> None:
    assert len(_blocks()) >= 20, "the docs' python blocks were not found: did the fence syntax change?"


def _pictures(page: Path, name: str) -> list[str]:
    """The pictures that page shows with alt text `name`: ![name](img/....png)."""
    return re.findall(rf"!\[{name}\]\((img/[^)]+\.png)\)", page.read_text(encoding="utf-8"))


def test_every_op_has_an_entry_and_a_picture() -> None:
    """docs/ops.md has a section for every op pixelpipe exports, and a generated picture of each."""
    text = (ROOT / "docs" / "ops.md").read_text(encoding="utf-8")
    kinds = {pp.Op, pp.GeometryOp, pp.ColorOp, pp.PixelOp, pp.BatchOp, pp.TargetsOp}
    ops = [n for n in pp.__all__ if isinstance(getattr(pp, n), type) and issubclass(getattr(pp, n), pp.Op)
           and getattr(pp, n) not in kinds]
    assert len(ops) >= 17, ops
    for name in ops:
        assert re.search(rf"^### {name}$", text, re.MULTILINE), f"docs/ops.md has no section '### {name}'"
        pictures = _pictures(ROOT / "docs" / "ops.md", name)
        assert pictures, f"docs/ops.md shows no picture of {name} (![{name}](img/...png))"
        for picture in pictures:
            assert (ROOT / "docs" / picture).is_file(), f"{picture} is missing: run python docs/make_pictures.py"


def test_every_preset_has_a_picture() -> None:
    """The presets' section of docs/getting-started.md (where docs/ops.md points for them) shows
    a generated picture of every preset in pixelpipe.presets."""
    from pixelpipe import presets

    assert "getting-started.md#2-choose-the-transforms-presets" in (ROOT / "docs" / "ops.md").read_text(encoding="utf-8")
    page = ROOT / "docs" / "getting-started.md"
    assert len(presets.PRESETS) >= 8, presets.PRESETS
    for name in presets.PRESETS:
        pictures = _pictures(page, name)
        assert pictures, f"docs/getting-started.md shows no picture of preset {name} (![{name}](img/...png))"
        for picture in pictures:
            assert (ROOT / "docs" / picture).is_file(), f"{picture} is missing: run python docs/make_pictures.py"


def test_pictures_stay_small() -> None:
    """The generated pictures keep the repository light, and every one of them is shown on a
    page (a picture no page shows is budget spent on nothing)."""
    sizes = {p.name: p.stat().st_size for p in (ROOT / "docs" / "img").glob("*.png")}
    assert all(n < 120_000 for n in sizes.values()), {k: v for k, v in sizes.items() if v >= 120_000}
    assert sum(sizes.values()) < 1.5 * 2**20  # docs/make_pictures.py holds to the same
    shown = set(re.findall(r"\]\((?:docs/)?img/([^)]+\.png)\)", "".join(p.read_text(encoding="utf-8") for p in PAGES)))
    assert set(sizes) <= shown, f"pictures in docs/img that no page shows: {sorted(set(sizes) - shown)}"


def test_links_between_pages_resolve() -> None:
    """Relative links in README.md and docs/*.md point at files that exist (the docs build checks
    docs/ itself; this covers README.md and links out of docs/)."""
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"

