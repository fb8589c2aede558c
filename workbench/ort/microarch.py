"""The CPU's microarchitecture, named from the instruction sets the OS reports (and family/model where they do not decide).

The fleet groups rows, and so tuned plans, by this name (:func:`workbench.measure.fleet.rows.machine_type`).
archspec picks the newest microarchitecture all of whose flags the OS shows, and it checks many flags no kernel
here uses (``waitpkg``, ``cldemote``, ``movdiri``, ``rdseed``, ``pku``, ...). A hypervisor hides some of those, and
archspec 0.2.7 then names an AMX Xeon (family 6 model 207) "icelake" and this session's Zen 5 (family 26, no
``rdseed`` nor ``pku`` shown) the generic "x86_64_v4". :data:`RULES` decides from the flags that pick kernels
(AMX, AVX512-FP16, AVX512-BF16, VNNI, AVX-512), then from family and model; archspec's choice on the same flags
(:func:`archspec_name`) is kept for what the rules do not cover (older x86, ARM, POWER). Names are archspec's
where it has one, so rows from machines it reads right group with ours.
"""

from __future__ import annotations

from dataclasses import dataclass

import archspec.cpu

INTEL, AMD = "GenuineIntel", "AuthenticAMD"


@dataclass(frozen=True)
class Rule:
    """``name`` for a CPU of ``vendor`` (and of ``family``, when given) that reports one of ``flags``, or whose
    ``(family, model)`` is in ``models`` (flags a hypervisor hides: the model still says which silicon it is); with
    ``family`` and neither flags nor models, every CPU of that family."""

    name: str
    vendor: str
    flags: frozenset = frozenset()
    family: int | None = None
    models: frozenset = frozenset()

    def matches(self, vendor: str, family: int | None, model: int | None, flags: set) -> bool:
        if vendor != self.vendor or (self.family is not None and family != self.family):
            return False
        if not self.flags and not self.models:
            return self.family is not None
        return bool(self.flags & flags) or (family, model) in self.models


def _r(name: str, vendor: str, flags=(), family: int | None = None, models=()) -> Rule:
    return Rule(name, vendor, frozenset(flags), family, frozenset(models))


_ZEN4_MODELS = {*range(0x10, 0x20), *range(0x60, 0x80), *range(0xA0, 0xB0)}  # Genoa, Phoenix, Bergamo and Siena

#: Newest first; the first that matches names the CPU. Emerald Rapids (model 207) has Sapphire Rapids' instruction
#: sets and archspec names both sapphirerapids; no Intel server before them has AVX512-FP16. archspec has no
#: Cooper Lake (it would say cascadelake): the only Intel CPU with AVX512-BF16 and neither AMX nor FP16.
RULES = (
    _r("graniterapids", INTEL, {"amx_fp16"}, models={(6, 173), (6, 174)}),
    _r("sapphirerapids", INTEL, {"amx_tile", "amx_int8", "amx_bf16", "avx512_fp16"}, models={(6, 143), (6, 207)}),
    _r("cooperlake", INTEL, {"avx512_bf16"}),
    _r("icelake", INTEL, {"avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq"},
       models={(6, 106), (6, 108), (6, 125), (6, 126)}),
    _r("cascadelake", INTEL, {"avx512_vnni"}),
    _r("skylake_avx512", INTEL, {"avx512f"}),
    _r("alderlake", INTEL, {"avx_vnni"}),  # AVX-VNNI without AVX-512: the hybrid client cores
    _r("zen6", AMD, {"avx512_fp16"}, 26),  # archspec's zen6 is its zen5 with AVX512-FP16
    _r("zen5", AMD, family=26),
    _r("zen4", AMD, {"avx512f"}, 25, {(25, m) for m in _ZEN4_MODELS}),
    _r("zen3", AMD, family=25),  # family 25 without AVX-512: Milan, Vermeer
    _r("zen2", AMD, family=23, models={(23, m) for m in range(0x30, 0x100)}),
    _r("zen", AMD, family=23),
)


def name_microarch(vendor: str, family: int | None, model: int | None, flags) -> str | None:
    """The microarchitecture of a CPU from its cpuinfo ``vendor_id``, ``cpu family``, ``model`` and ``flags``: the
    first of :data:`RULES` that matches, else archspec's choice on those flags; None where neither knows."""
    have = set(flags)
    for rule in RULES:
        if rule.matches(vendor, family, model, have):
            return rule.name
    return archspec_name(vendor, have)


def archspec_name(vendor: str, flags) -> str | None:
    """What ``archspec.cpu.host()`` names an x86 CPU with these flags: the newest of its microarchitectures (of the
    vendor, or generic) all of whose features are reported, descending from the best generic level."""
    have = archspec.cpu.Microarchitecture("", [], vendor, set(flags), {}).features  # as archspec reads them (sse3)
    fits = [t for t in archspec.cpu.TARGETS.values()
            if t.family.name == "x86_64" and t.vendor in (vendor, "generic") and t.features <= have]
    if not fits:
        return None
    key = lambda t: (len(t.ancestors), len(t.features))  # noqa: E731 - archspec's own order
    generic = max((t for t in fits if t.vendor == "generic"), key=key)
    better = [t for t in fits if t > generic]
    return max(better, key=key).name if better else generic.name


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines of a ``/proc/cpuinfo`` text (ARM's ``Features`` as ``flags``)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break  # the first processor's block ends at its blank line
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault("flags" if key.strip() == "Features" else key.strip(), value.strip())
    return out


def from_cpuinfo(text: str) -> str | None:
    """:func:`name_microarch` of a ``/proc/cpuinfo`` text; None for an x86 text without flags."""
    f = cpuinfo_fields(text)
    if not f.get("flags") or not f.get("vendor_id"):
        return None
    num = lambda k: int(f[k], 0) if f.get(k, "").strip().isdigit() else None  # noqa: E731
    return name_microarch(f["vendor_id"], num("cpu family"), num("model"), f["flags"].split())


def host_microarch() -> str | None:
    """This machine's microarchitecture: from ``/proc/cpuinfo`` on x86 Linux, else archspec's own detection
    (ARM, macOS); None where neither can tell."""
    try:
        with open("/proc/cpuinfo") as fh:
            name = from_cpuinfo(fh.read())
    except OSError:
        name = None
    if name:
        return name
    try:
        return str(archspec.cpu.host().name)
    except Exception:  # noqa: BLE001 - a CPU archspec cannot read: unknown, not an error
        return None


__all__ = ["RULES", "Rule", "name_microarch", "archspec_name", "cpuinfo_fields", "from_cpuinfo", "host_microarch"]
