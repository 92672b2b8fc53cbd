"""A hostile trainer: the real SFT, then a forged usage file, a flooded log and a booby-trapped checkpoint."""

import json
import os
import runpy
import sys

out = sys.argv[sys.argv.index("--out") + 1]
sys.argv = ["vtb.engine.sft", *sys.argv[1:]]
try:
    runpy.run_module("vtb.engine.sft", run_name="__main__")
except SystemExit:
    pass
with open(os.environ["VTB_USAGE_FILE"], "w") as f:
    json.dump({"flops": -1e14}, f)  # a refund, if the ledger believed it
line = "x" * 999
for _ in range(60_000):  # 60 MB of log
    print(line)
sys.stdout.write("z" * (40 << 20) + "\n")  # and one 40 MB line
os.symlink(".", os.path.join(out, "loop"))
os.symlink("/proc/self/environ", os.path.join(out, "environ"))
with open(os.path.join(out, "hostile_marker.txt"), "w") as f:
    f.write("trained by the hostile trainer\n")  # the null model lacks this, if made from scratch
summary = os.path.join(out, "train_summary.json")
if os.path.exists(summary):
    os.remove(summary)
os.mkfifo(summary)
