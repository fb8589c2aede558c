"""Run a workshop notebook with nbclient and collect what it printed: one runner for every notebook test."""

from __future__ import annotations

from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def read(name: str):
    """The committed notebook ``name`` (without ``.ipynb``)."""
    import nbformat

    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def assert_valid(name: str) -> None:
    """The file as committed passes nbformat's validation with every warning an error (a cell without an
    ``id``, which nbformat 4.5 requires, is only a warning today and a hard error in a later nbformat)."""
    import json
    import warnings

    import nbformat

    raw = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    assert (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5), f"{name}: saved as nbformat < 4.5 (no cell ids)"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(raw)
    ids = [c.get("id") for c in raw["cells"]]
    assert None not in ids and len(set(ids)) == len(ids), f"{name}: a cell without an id, or two with the same"


def assert_committed_clean(name: str) -> None:
    """Valid (:func:`assert_valid`), with no outputs and no execution counts in the committed file."""
    assert_valid(name)
    for cell in read(name).cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name} has outputs"


def run(name: str, cwd: Path, timeout: int = 600):
    """Execute ``name`` start to finish in ``cwd``; fail on any error output.

    Returns:
        ``(book, text)``: the executed notebook and everything its cells printed or displayed as text.
    """
    from nbclient import NotebookClient

    book = read(name)
    NotebookClient(book, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    texts = []
    for cell in book.cells:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{name}: {out.get('ename')}: {out.get('evalue')}"
            texts.append(out.get("text", "") + str(out.get("data", {}).get("text/plain", "")))
    joined = "\n".join(texts)
    assert "Traceback" not in joined, name
    return book, joined
