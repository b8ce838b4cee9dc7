"""Prints GSM-Symbolic problems as JSON lines, generated exactly as reasoning-gym 0.1.25's
GSMSymbolicDataset does (task list from Random(seed).choices(tasks_ok), item i from
Random(seed + i), difficulty 1.0, the same question suffix), but from the unzipped
generator files alone: reasoning_gym is stubbed with only its utils.py, which is all the
generators import.

usage: python3 gsm_symbolic.py DIR SEED COUNT
DIR holds generators_*.py, utils.py and gsm_symbolic.py (for its tasks_ok list).
"""

import ast
import glob
import importlib.util
import json
import os
import sys
import types
from random import Random

SUFFIX = " Give the result as your final answer. Do not include units."


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tasks_ok(directory):
    # Read the list literally instead of importing gsm_symbolic.py, which needs the package's
    # dataset registry.
    tree = ast.parse(open(os.path.join(directory, "gsm_symbolic.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "tasks_ok" for t in node.targets):
            return ast.literal_eval(node.value)
    sys.exit("gsm_symbolic.py has no tasks_ok list")


def main():
    directory, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.modules["reasoning_gym"] = types.ModuleType("reasoning_gym")
    load("reasoning_gym.utils", os.path.join(directory, "utils.py"))
    generators = {}
    for path in sorted(glob.glob(os.path.join(directory, "generators_*.py"))):
        module = load("gsm_generators_" + os.path.basename(path)[:-3], path)
        for name in dir(module):
            if name.startswith("generate_"):
                generators[int(name[len("generate_"):])] = getattr(module, name)
    ok = [t for t in tasks_ok(directory) if t in generators]
    if not ok:
        sys.exit("no usable GSM-Symbolic generator in " + directory)
    task_indices = Random(seed).choices(ok, k=count)
    for idx in range(count):
        example = generators[task_indices[idx]](Random(seed + idx), 1.0)
        print(json.dumps({
            "id": f"gsm-symbolic/{task_indices[idx]}/{idx}",
            "question": example["question"] + SUFFIX,
            "answer": str(example["answer"]),
        }))


if __name__ == "__main__":
    main()
