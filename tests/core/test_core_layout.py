"""Size limits on the planner's code (issue 10): `core/plan.py` only orchestrates (≤ 300 lines), no function under
vramctl/core runs over 120 lines, and vLLM's version switches live in one place (`engines/vllm/rules.py`), including
the start-up choices of `engines/vllm_runtime.py` (sampler, V0 fall-backs, LoRA)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "vramctl" / "core"
PLAN_MAX_LINES = 300
FUNCTION_MAX_LINES = 120

# Functions in modules another change is splitting (core/check.py into core/check/, the serve-command parser
# behind the flag registry). Remove an entry when its function is split; the list must only shrink.
PENDING_SPLIT: set[tuple[str, str]] = set()
"""(module, function) pairs still over the limit; empty since the check package and the serve-command reader were
split (keep it empty)."""


def _functions(path: Path) -> list[tuple[str, int, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def long_functions(root: Path, limit: int) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for name, line, length in _functions(path):
            if length > limit and (rel, name) not in PENDING_SPLIT:
                out.append(f"{rel}:{line} {name}: {length} lines")
    return out


def test_plan_module_only_orchestrates() -> None:
    lines = len((CORE / "plan.py").read_text().splitlines())
    assert lines <= PLAN_MAX_LINES, f"vramctl/core/plan.py has {lines} lines (at most {PLAN_MAX_LINES})"


def test_no_function_under_core_over_the_limit() -> None:
    assert long_functions(CORE, FUNCTION_MAX_LINES) == []


def test_the_function_measure_catches_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_MAX_LINES))
    (tmp_path / "long.py").write_text(f"def too_long() -> None:\n{body}\n")
    (tmp_path / "short.py").write_text("def short() -> None:\n    pass\n")
    assert long_functions(tmp_path, FUNCTION_MAX_LINES) == [f"long.py:1 too_long: {FUNCTION_MAX_LINES + 1} lines"]


def version_comparisons(path: Path) -> list[str]:
    """Comparisons against a literal version tuple (`v >= (0, 28, 0)`) or a parsed version
    (`parse_version(x) < ...`): the switches that belong in `VllmRules`."""

    def is_version(node: ast.expr) -> bool:
        if isinstance(node, ast.Tuple) and 2 <= len(node.elts) <= 4:
            return all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "parse_version"
        )

    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Compare) and any(is_version(n) for n in (node.left, *node.comparators)):
            out.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    return out


def test_vllm_version_switches_live_in_rules_py() -> None:
    vllm_pkg = CORE / "engines" / "vllm"
    paths = [p for p in sorted(vllm_pkg.glob("*.py")) if p.name != "rules.py"]
    paths += [CORE / "plan.py", CORE / "plan_result.py", CORE / "kv.py", CORE / "engines" / "version_rules.py"]
    paths += [CORE / "engines" / "vllm_runtime.py"]
    paths += [ROOT / "vramctl" / "measure" / "profiler.py", ROOT / "vramctl" / "diagnose" / "startup.py"]
    found = [hit for p in paths for hit in version_comparisons(p)]
    assert found == [], "compare vLLM versions in vramctl/core/engines/vllm/rules.py (VllmRules), not here"
    assert version_comparisons(vllm_pkg / "rules.py"), "rules.py holds the switches: the check must see them"
