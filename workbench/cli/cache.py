"""``workbench cache``: what the cache holds, per model and kind, and pruning it."""

from __future__ import annotations

import argparse
import time

from ..cache.kinds import KINDS
from ..cache.root import cache_root
from ..errors import OutputPathError
from ..path_checks import folder_unwritable, not_a_folder
from ..settings import arg_number
from . import print_json


def register(sub) -> None:
    from ..cache.admin import MAX_GB

    kinds = "; ".join(f"{k.name}: {k.what}" for k in KINDS)
    p = sub.add_parser("cache", help="list what the cache holds (per model and kind) and prune it",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="List the cache's entries per model and kind with their sizes, or prune them: "
                                   "by age, down to a total size (least recently used first), or all. Only what the "
                                   "workbench wrote is ever removed (a file of yours in the cache folder stays), "
                                   "never an entry a running workbench process uses; listing changes nothing. "
                                   "WORKBENCH_CACHE_MAX_GB sets a limit every command keeps the cache under.\n\n"
                                   f"Kinds: {kinds}.")
    p.add_argument("action", nargs="?", choices=("list", "prune"), default="list")
    p.add_argument("--older-than", type=arg_number(minimum=0, maximum=1e6), default=None, metavar="DAYS",
                   help="prune: entries unused this long")
    p.add_argument("--max-gb", type=arg_number(minimum=0, maximum=MAX_GB), default=None, metavar="GB",
                   help="prune: least recently used entries until the cache holds at most this much")
    p.add_argument("--all", action="store_true", help="prune: every entry not in use")
    p.add_argument("--old-versions", action="store_true",
                   help="prune: persisted fusion timelines of other package or workbench versions (never read again)")
    p.add_argument("--dry-run", action="store_true", help="prune: say what would go, remove nothing")
    p.add_argument("--entries", action="store_true", help="list: every entry, not only the totals")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..cache.admin import entries, foreign, human, prune

    problem = not_a_folder(cache_root(write=False))
    if problem is not None:
        raise OutputPathError(f"the cache folder cannot be read: {problem}; point WORKBENCH_CACHE at a folder")
    root = cache_root(write=args.action == "prune")
    if args.action == "prune" and not args.dry_run:
        problem = folder_unwritable(root)
        if problem is not None:  # a read-only prepared folder: nothing can go, and saying "freed 0 B" would hide why
            raise OutputPathError(f"cannot prune the cache folder {root}: {problem}; nothing was removed "
                                  f"(--dry-run shows what would go)")
    if args.action == "prune":
        max_bytes = None if args.max_gb is None else int(args.max_gb * 1e9)
        versions = None
        if args.old_versions:
            from ..fusion.timeline_store import versions as current

            versions = current()
        res = prune(older_than_days=args.older_than, max_bytes=max_bytes, everything=args.all,
                    dry_run=args.dry_run, timeline_versions=versions)
        if args.json:
            print_json(res)
            return 0
        verb = "would free" if args.dry_run else "freed"
        print(f"{verb} {human(res['freed_bytes'])} in {len(res['removed'])} entries of {root}"
              + (f"; kept {len(res['kept_in_use'])} in use by a running workbench process"
                 if res["kept_in_use"] else ""))
        alone = res["left_alone"] + [str(p) for p in foreign(root)]  # inside removed entries, and beside them
        if alone:
            print(f"left alone {len(alone)} files or folders the workbench did not write, e.g. {alone[0]}")
        return 0
    return _list(args, root, entries(root), foreign(root))


def _list(args, root, items, strangers) -> int:
    from ..cache.admin import human, summary, unique_bytes

    groups = summary(items)
    disk = unique_bytes(items)
    if args.json:
        print_json({"root": str(root), "total_bytes": disk, "entry_bytes": sum(e.bytes for e in items),
                    "groups": groups, "entries": [e.to_dict() for e in items] if args.entries else None,
                    "not_the_workbenchs": [str(p) for p in strangers]})
        return 0
    shared = sum(e.bytes for e in items) - disk
    print(f"{root}: {human(disk)} on disk in {len(items)} entries"
          + (f" (each weight stored once: {human(shared)} more if every model kept its own copy)"
             if shared > 1e6 else ""))
    if strangers:
        print(f"  {len(strangers)} files or folders the workbench did not write are left alone, e.g. {strangers[0]}")
    if not items:
        return 0
    print(f"{'model':<28}{'kind':<11}{'entries':>8}{'size':>10}  last used")
    now = time.time()
    for g in groups:
        age = (now - g["last_used"]) / 86400
        print(f"{g['model'][:27]:<28}{g['kind']:<11}{g['entries']:>8}{human(g['bytes']):>10}  "
              f"{age:.1f} days ago" + (f"  ({g['in_use']} in use)" if g["in_use"] else ""))
    if args.entries:
        for e in sorted(items, key=lambda e: -e.bytes):
            print(f"  {e.kind}/{e.key}  {human(e.bytes)}  {e.model}" + ("  in use" if e.in_use else ""))
    return 0
