"""Loaders for the real tau-bench and tau2-bench data from a local checkout.

Both return (db, tasks, policy) in one internal schema, tau-bench's: a task is
{"id", "user_id", "instruction", "actions": [{"name", "kwargs"}], "outputs"} and the retail db is
{"users", "orders", "products"} keyed by id. tau-bench keeps its tasks as Python source
(`TASKS_TEST = [Task(...), ...]`); that file is data from disk, so it is read with `ast` and only
Task(...)/Action(...) calls over literal values are accepted -- nothing in it is ever executed.
Two environments are played, retail and airline (tau-bench's `env`, tau2's `domain`; task.env);
the airline db is {"flights", "reservations", "users"}.
Errors name the file and the expected layout, because a half-loaded task set would quietly
change what the benchmark measures. `load_splits` returns every split the source ships (tau-bench's
tasks_{train,dev,test}, tau2's split_tasks.json), so a bench plays the official test split and
trains on the official train split. A folder of another environment than the one asked for
(airline given for retail, or tau2's telecom) is refused by name, never read as the wrong one.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path
from typing import Any

RETAIL_TABLES = ("users", "orders", "products")
TABLES = {"retail": RETAIL_TABLES, "airline": ("flights", "reservations", "users")}
ENVS = tuple(TABLES)
TAU_BENCH_LAYOUT = (
    "a tau-bench checkout: <root>/tau_bench/envs/<env>/{data/<table>.json for each db table "
    "(retail: users, orders, products; airline: flights, reservations, users), wiki.md, "
    "tasks_<split>.py or tasks_<split>.json}; root may also be the env folder"
)
TAU2_LAYOUT = (
    "a tau2-bench checkout: <root>/data/tau2/domains/<domain>/{db.json, tasks.json, policy.md, "
    "optional split_tasks.json}; root may also be the domain folder"
)
_CALLS = ("Task", "Action")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None


def _require(path: Path, layout: str) -> Path:
    if not path.is_file():
        raise ValueError(f"missing file {path} (expected {layout})")
    return path


def _check_db(db: Any, path: Path, env: str) -> dict:
    if not isinstance(db, dict):
        raise ValueError(f"{path}: the db must be a JSON object of tables, got {type(db).__name__}")
    for table in TABLES.get(env, ()):
        if not isinstance(db.get(table), dict):
            raise ValueError(f"{path}: {env} db needs a {table!r} table, an object keyed by id")
    return db


def _task(raw: Any, task_id: str, where: str) -> dict:
    """Normalise one tau-bench task dict (from JSON or a parsed Task call) to the internal schema."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: task {task_id} is not a Task(...) call or an object")
    if not isinstance(raw.get("instruction"), str):
        raise ValueError(f"{where}: task {task_id} has no string 'instruction'")
    if "actions" not in raw:
        raise ValueError(
            f"{where}: task {task_id} has no 'actions'; add actions=[Action(name=..., kwargs={{...}})]"
        )
    actions = []
    for action in raw["actions"] or []:
        kwargs = action.get("kwargs", action.get("arguments", {})) if isinstance(action, dict) else None
        if not isinstance(kwargs, dict) or not isinstance(action.get("name"), str):
            raise ValueError(f"{where}: task {task_id} has an action without a name and a kwargs object")
        actions.append({"name": action["name"], "kwargs": kwargs})
    extra = {k: v for k, v in raw.items() if k not in ("user_id", "instruction", "actions", "outputs")}
    return {
        **extra,
        "id": task_id,
        "user_id": str(raw.get("user_id") or ""),
        "instruction": raw["instruction"],
        "actions": actions,
        "outputs": [str(o) for o in raw.get("outputs") or []],
    }


def _literal(node: ast.AST, path: Path) -> Any:
    """Evaluate a literal expression, allowing Task(...)/Action(...) calls with keyword arguments."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, path) for e in node.elts]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_literal(k, path): _literal(v, path) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand, path)
        if isinstance(value, int | float):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        if node.args or any(k.arg is None for k in node.keywords):
            raise ValueError(f"{path}:{node.lineno}: {node.func.id}(...) must use plain keyword arguments")
        return {k.arg: _literal(k.value, path) for k in node.keywords}
    snippet = ast.unparse(node)[:80]
    raise ValueError(
        f"{path}:{node.lineno}: {snippet!r} is not a literal; a tasks file may only hold "
        "Task(...)/Action(...) calls with literal keyword values (it is parsed, never executed)"
    )


def _tasks_from_python(path: Path, split: str) -> list[Any]:
    try:
        module = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid Python ({err.msg})") from None
    lists = {}
    for stmt in module.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if isinstance(stmt, ast.AnnAssign):
            target = stmt.target
        if isinstance(target, ast.Name) and isinstance(stmt.value, ast.List):
            lists[target.id] = stmt.value
    wanted = f"TASKS_{split.upper()}"
    candidates = [n for n in lists if n.upper().startswith("TASKS")]
    name = wanted if wanted in lists else (candidates[0] if len(candidates) == 1 else None)
    if name is None:
        raise ValueError(f"{path}: expected a top-level list `{wanted} = [Task(...), ...]`")
    return _literal(lists[name], path)


def _tau_bench_env_dir(root: Path, env: str) -> Path:
    for candidate in (root / "tau_bench" / "envs" / env, root / "envs" / env, root):
        if (candidate / "data").is_dir():
            if candidate == root:
                _refuse_other_domain(root, sorted(p.stem for p in (root / "data").glob("*.json")), None, env)
            return candidate
    raise ValueError(f"{root}: no tau-bench env {env!r} found (expected {TAU_BENCH_LAYOUT})")


def domain_of(tables: list[str], named: str | None) -> str | None:
    """The environment a folder holds: the one its tasks name, else the one its db tables are."""
    if named:
        return named
    return next((env for env, needed in TABLES.items() if set(needed) <= set(tables)), None)


def _refuse_other_domain(where: Path, tables: list[str], named: str | None, wanted: str) -> None:
    """A folder of another tau environment than `wanted` is refused by name, never misread."""
    found = domain_of(tables, named)
    if found is None or found == wanted:
        return
    fix = (
        f"set task.env={found}"
        if found in ENVS
        else f"task=tau plays {' and '.join(ENVS)} only; point task.path at one of those"
    )
    raise ValueError(
        f"{where}: this is the tau {found!r} domain (db tables: {', '.join(tables) or 'none'}), but "
        f"task.env={wanted} was asked for; {fix} (tau-bench: tau_bench/envs/<env>; "
        "tau2: data/tau2/domains/<domain>), or point task.path at the checkout's root"
    )


def load_tau_bench(root: Path, env: str = "retail", split: str = "test") -> tuple[dict, list[dict], str]:
    """(db, tasks, policy) from a tau-bench checkout; task ids are f"{split}-{index:04d}"."""
    if env not in ENVS:
        raise ValueError(f"task.env={env!r} is not one of {', '.join(ENVS)}")
    env_dir = _tau_bench_env_dir(Path(root), env)
    data = env_dir / "data"
    db = {t: _read_json(_require(data / f"{t}.json", TAU_BENCH_LAYOUT)) for t in TABLES[env]}
    _check_db(db, data, env)
    policy = _require(env_dir / "wiki.md", TAU_BENCH_LAYOUT).read_text()

    json_file, py_file = env_dir / f"tasks_{split}.json", env_dir / f"tasks_{split}.py"
    if json_file.is_file():
        source, raw = json_file, _read_json(json_file)
    elif py_file.is_file():
        source, raw = py_file, _tasks_from_python(py_file, split)
    else:
        found = sorted(p.name for p in env_dir.glob("tasks_*.*"))
        raise ValueError(f"no tasks for split {split!r}: {py_file} not found (task files there: {found})")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{source}: expected a non-empty list of tasks")
    tasks = [_task(t, f"{split}-{i:04d}", str(source)) for i, t in enumerate(raw)]
    return db, tasks, policy


def _render_instructions(scenario: dict) -> str:
    """Readable user instruction from a tau2 user_scenario (structured instructions or plain text)."""
    instructions = scenario.get("instructions")
    parts = [("Persona", scenario.get("persona"))]
    if isinstance(instructions, dict):
        parts += [
            ("Reason for call", instructions.get("reason_for_call")),
            ("Known info", instructions.get("known_info")),
            ("Unknown info", instructions.get("unknown_info")),
            ("Task instructions", instructions.get("task_instructions")),
        ]
    else:
        parts.append(("Instructions", instructions))
    return "\n".join(
        f"{label}: {text.strip()}" for label, text in parts if isinstance(text, str) and text.strip(" .")
    )


def _tau2_user_id(scenario: dict, instruction: str, actions: list[dict], users: dict) -> str:
    """The user id named in the scenario, else a db user id in its text, else one in the actions."""
    instructions = scenario.get("instructions")
    for holder in (scenario, instructions if isinstance(instructions, dict) else {}):
        if isinstance(holder.get("user_id"), str):
            return holder["user_id"]
    for word in re.findall(r"\b[a-z][a-z0-9_]*_\d+\b", instruction):
        if word in users:
            return word
    for action in actions:
        if isinstance(action["kwargs"].get("user_id"), str):
            return action["kwargs"]["user_id"]
    return ""


def _tau2_task(raw: Any, index: int, path: Path, users: dict) -> dict:
    if not isinstance(raw, dict) or raw.get("id") is None:
        raise ValueError(f"{path}: task #{index} is not an object with an 'id'")
    task_id = str(raw["id"])
    scenario = raw.get("user_scenario")
    if not isinstance(scenario, dict) or not scenario.get("instructions"):
        raise ValueError(f"{path}: task {task_id} has no user_scenario.instructions")
    criteria = raw.get("evaluation_criteria")
    if not isinstance(criteria, dict) or "actions" not in criteria:
        raise ValueError(f"{path}: task {task_id} has no evaluation_criteria.actions")
    instruction = _render_instructions(scenario)
    actions = []
    for action in criteria["actions"] or []:
        if not isinstance(action, dict) or not isinstance(action.get("name"), str):
            raise ValueError(f"{path}: task {task_id} has an action without a name")
        entry = {"name": action["name"], "kwargs": action.get("arguments") or {}}
        if action.get("compare_args") is not None:  # tau2's ACTION check compares only these
            entry["compare_args"] = list(action["compare_args"])
        actions.append(entry)
    task = {
        "id": task_id,
        "user_id": _tau2_user_id(scenario, instruction, actions, users),
        "instruction": instruction,
        "actions": actions,
        "outputs": [str(o) for o in criteria.get("communicate_info") or []],
    }
    for key in ("nl_assertions", "reward_basis"):
        if criteria.get(key) is not None:
            task[key] = criteria[key]
    return task


def _tau2_domain_dir(root: Path, domain: str) -> Path | None:
    return next(
        (d for d in (root / "data" / "tau2" / "domains" / domain, root) if (d / "tasks.json").is_file()), None
    )


def load_tau2(root: Path, domain: str = "retail", split: str = "test") -> tuple[dict, list[dict], str]:
    """(db, tasks, policy) from a tau2-bench checkout, restricted to `split` when split_tasks.json exists."""
    root = Path(root)
    if domain not in ENVS:
        raise ValueError(f"task.env={domain!r} is not one of {', '.join(ENVS)}")
    domain_dir = _tau2_domain_dir(root, domain)
    if domain_dir is None:
        raise ValueError(f"{root}: no tau2 domain {domain!r} found (expected {TAU2_LAYOUT})")
    db_json, db_toml = domain_dir / "db.json", domain_dir / "db.toml"
    if db_json.is_file():
        db_path, db = db_json, _read_json(db_json)
    elif db_toml.is_file():
        db_path, db = db_toml, tomllib.loads(db_toml.read_text())
    else:
        raise ValueError(f"missing file {db_json} (expected {TAU2_LAYOUT})")
    if isinstance(db, dict):
        named = {
            str((t.get("user_scenario") or {}).get("instructions", {}).get("domain"))
            for t in _read_json(domain_dir / "tasks.json")
            if isinstance(t, dict) and isinstance((t.get("user_scenario") or {}).get("instructions"), dict)
        } - {"None"}
        _refuse_other_domain(domain_dir, sorted(db), next(iter(named - {domain}), None), domain)
    _check_db(db, db_path, domain)
    policy = _require(domain_dir / "policy.md", TAU2_LAYOUT).read_text()

    tasks_path = domain_dir / "tasks.json"
    raw = _read_json(tasks_path)
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{tasks_path}: expected a non-empty JSON list of tau2 tasks")
    tasks = [_tau2_task(t, i, tasks_path, db.get("users") or {}) for i, t in enumerate(raw)]

    split_path = domain_dir / "split_tasks.json"
    if split_path.is_file():
        splits = _read_json(split_path)
        if not isinstance(splits, dict):
            raise ValueError(f"{split_path}: expected an object mapping split names to task id lists")
        if split not in splits:
            raise ValueError(f"{split_path}: unknown split {split!r}; available splits: {sorted(splits)}")
        keep = {str(i) for i in splits[split]}
        tasks = [t for t in tasks if t["id"] in keep]
    return db, tasks, policy


def load(source: str, path: str | Path, split: str, env: str = "retail") -> tuple[dict, list[dict], str]:
    """Dispatch on source: "tau_bench" (its env `env`) or "tau2" (its domain `env`)."""
    if source == "tau_bench":
        return load_tau_bench(Path(path), env, split)
    if source == "tau2":
        return load_tau2(Path(path), env, split)
    raise ValueError(f"unknown tau data source {source!r}; use 'tau_bench' or 'tau2'")


OFFICIAL_SPLITS = ("train", "dev", "test")


def load_splits(
    source: str, path: str | Path, env: str = "retail"
) -> tuple[dict, dict[str, list[dict]], str]:
    """(db, {split: tasks}, policy) with every official split the source ships; "test" always.

    tau-bench: tasks_train / tasks_dev / tasks_test files that exist; tau2: the "train" and "test"
    lists of split_tasks.json when it exists ("base", their union, is not a split), else all tasks
    as "test". A task id in two splits is refused: the test split would leak into training.
    """
    db, test, policy = load(source, path, "test", env)
    splits = {"test": test}
    for name in ("train", "dev"):
        if _has_split(source, Path(path), name, env):
            splits[name] = load(source, path, name, env)[1]
    seen: dict[str, str] = {}
    for name, tasks in splits.items():
        for task in tasks:
            if task["id"] in seen and seen[task["id"]] != name:
                raise ValueError(
                    f"{path}: task {task['id']} is in both the {seen[task['id']]!r} and {name!r} splits; "
                    "fix the split lists (split_tasks.json) so that no task is in two"
                )
            seen[task["id"]] = name
    return db, splits, policy


def _has_split(source: str, root: Path, split: str, env: str) -> bool:
    if source == "tau_bench":
        env_dir = _tau_bench_env_dir(root, env)
        return any((env_dir / f"tasks_{split}.{ext}").is_file() for ext in ("py", "json"))
    domain_dir = _tau2_domain_dir(root, env)
    path = domain_dir / "split_tasks.json" if domain_dir else None
    return bool(path and path.is_file() and split in (_read_json(path) or {}))
