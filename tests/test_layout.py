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


MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6


def _wide_or_long(tree: ast.AST) -> list[tuple[int, str]]:
    """Functions over MAX_FUNCTION_LINES lines or MAX_PARAMETERS parameters (self and cls not
    counted) whose docstring gives no reason (names its parameters, options or lines)."""
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                  *([a.kwarg] if a.kwarg else [])]
        count = len([p for p in params if p.arg not in ("self", "cls")])
        lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
        reason = re.search(r"parameters|options|lines", ast.get_docstring(fn) or "")
        if (lines > MAX_FUNCTION_LINES or count > MAX_PARAMETERS) and not reason:
            found.append((fn.lineno, f"{fn.name}: {lines} lines, {count} parameters"))
    return found


def test_no_function_is_long_or_wide_without_a_reason() -> None:
    found = [f"{p.relative_to(PACKAGE)}:{line}: {what}" for p in _modules()
             for line, what in _wide_or_long(ast.parse(p.read_text()))]
    assert not found, "split these, group their inputs, or say in the docstring why not:\n" + "\n".join(found)


def test_no_helper_takes_the_job() -> None:
    """Only the loops that own a Job (sync/runs.py, a follower's sync/follow.py) and the Job itself
    (sync/ingest.py) handle one; the steps take the run's context (sync/context.py) and a
    table's work."""
    found = [f"{p.relative_to(PACKAGE)}:{fn.lineno}: {fn.name}" for p in _modules()
             if p.name not in ("ingest.py", "runs.py", "follow.py")
             for fn in ast.walk(ast.parse(p.read_text())) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for arg in [*fn.args.args, *fn.args.kwonlyargs]
             if arg.annotation is not None and "Job" in ast.unparse(arg.annotation)]
    assert not found, "these take the Job; hand them a RunContext and a TableWork instead:\n" + "\n".join(found)


def test_the_size_check_finds_what_it_looks_for() -> None:
    wide = ast.parse("def f(a, b, c, d, e, f, g):\n    pass\n\n"
                     "def g(a, b, c, d, e, f, g):\n    '''(Seven parameters: a reason.)'''\n")
    assert [line for line, _ in _wide_or_long(wide)] == [1]
