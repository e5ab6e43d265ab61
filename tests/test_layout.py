"""The package's layout stays what docs/architecture.md describes: few modules at the top, none
long, and no pgcdc import placed inside a function (where it could hide a cycle from a reader;
`lint-imports` in `make lint` checks the layering itself, function-level imports included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pgcdc"
MAX_TOP_MODULES = 12
MAX_LINES = 450


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_few_modules_sit_directly_in_the_package() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly in pgcdc/ ({top}): place new ones in a subpackage"


def test_no_module_is_long() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these before adding to them: {long}"


def _function_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """pgcdc imports inside a function, outside `if TYPE_CHECKING:` blocks."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pgcdc"):
                found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Import) and any(a.name.startswith("pgcdc") for a in node.names):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_pgcdc_import_is_placed_inside_a_function() -> None:
    found = [f"{p.relative_to(PACKAGE)}:{line}: {text}" for p in _modules()
             for line, text in _function_imports(ast.parse(p.read_text()))]
    assert not found, "import these at the top of their modules (a cycle is fixed by moving code, not imports):\n" + \
        "\n".join(found)


def test_the_checks_find_what_they_look_for() -> None:
    """The import check is not vacuous: it finds a function-level import in a sample."""
    sample = ast.parse("def f():\n    from pgcdc.lake import target\n    import pgcdc.faults\n")
    assert [line for line, _ in _function_imports(sample)] == [2, 3]


def test_each_sql_file_defines_one_function() -> None:
    """PgQ's rule (GUIDE.md): sql/functions/ holds one function per file, named after it, and
    install.txt lists every file once."""
    folder = PACKAGE.parent / "sql" / "functions"
    defined = {p.name: re.findall(r"^create or replace function pgcdc\.(\w+)\(", p.read_text(), re.M)
               for p in sorted(folder.glob("*.sql"))}
    wrong = {name: found for name, found in defined.items() if len(found) != 1 or found[0].lstrip("_") + ".sql" != name}
    assert not wrong, f"one function per file, the file named after it: {wrong}"
    listed = [line for line in (folder.parent / "install.txt").read_text().splitlines() if line.startswith("functions/")]
    assert sorted(listed) == sorted(f"functions/{name}" for name in defined) and len(set(listed)) == len(listed)
