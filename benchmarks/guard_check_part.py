"""Every candidate of the answer-guarded int8 search, scored on the part of the text it never saw.

    python benchmarks/guard_check_part.py [MODEL]     (default: minilm, the packaged real model)

`int8-guarded` chooses among its candidates on the search part of the built-in sentences; `workbench tune`
then judges the winner on the check part. This prints, for every candidate, its answers (Spearman of the
sentences' similarities / top-1 neighbour agreement against fp32) on the search part, on each half of it, and
on the check part, so one can see whether any candidate would have held where the chosen one did not, and how
noisy a 13-sentence part is. Prints the machine first.
"""
import sys
import tempfile
from pathlib import Path
from workbench.models import resolve
from workbench.export import export
from workbench.config import ExportConfig
from workbench.measure.variants.models import fuse_bert
from workbench.measure.tune.workload import one_at_a_time, split
from workbench.measure.variants import guarded as g
from workbench.ort.task_parity import task_parity
from workbench.ort.answer_policy import pct
from workbench.ort.machine import describe_machine, machine_line

print(machine_line(describe_machine(check_cuda=False)))

src = resolve(sys.argv[1] if len(sys.argv) > 1 else "minilm")
exp = export(src, ExportConfig())
fused = fuse_bert(exp.path, num_heads=src.num_heads, hidden_size=src.hidden_size)
sp = split(None)
search = one_at_a_time(src, sp.search)
check = one_at_a_time(src, sp.check)
halves = [one_at_a_time(src, sp.search[0::2]), one_at_a_time(src, sp.search[1::2])]
work = Path(tempfile.mkdtemp())
s = g._Search(fused, search, work, 2, lambda *a: None)
g._methods(s); g._roles(s)
if not any(c["holds"] for c in s.candidates):
    g._greedy(s, 12)
def tp(path, text):
    feeds = list(text.batches)
    s2 = g._Search.__new__(g._Search); s2.threads = 2; s2.feeds = feeds
    ref = g._Search._outputs(s2, fused); out = g._Search._outputs(s2, path)
    return task_parity(text.kind, ref, out, feeds, mask_token_id=text.mask_token_id)
for c in s.candidates:
    r = {"search": c["task_parity"]}
    for name, t in (("half0", halves[0]), ("half1", halves[1]), ("check", check)):
        r[name] = tp(c["path"], t)
    print(f"{c['label'][:60]:60s} holds={c['holds']!s:5s} " + "  ".join(
        f"{k} {v.get('spearman'):.4f}/{pct(v.get('top1_agreement'))}" for k, v in r.items()))
import shutil  # noqa: E402

shutil.rmtree(work, ignore_errors=True)
