"""The CPU's microarchitecture from the flags the OS reports, on real /proc/cpuinfo texts."""

from __future__ import annotations

import pytest

from workbench.measure.fleet.rows import machine_type
from workbench.ort.machine import describe_machine, isa_from_flags
from workbench.ort.microarch import archspec_name, cpuinfo_fields, from_cpuinfo, host_microarch, name_microarch

# This session's CPU as its /proc/cpuinfo reads (KVM guest): no rdseed, pku nor flush_l1d shown.
ZEN5 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 26
model		: 2
model name	: AMD EPYC
stepping	: 1
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht \
syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid \
tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx \
f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext vmmcall fsgsbase \
tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq adx smap avx512ifma clflushopt clwb avx512cd sha_ni \
avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 clzero xsaveerptr arat avx512vbmi umip \
avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm avx512_vp2intersect
bogomips	: 5192.24

processor	: 1
vendor_id	: AuthenticAMD
"""

# The AMX Xeon of MEASURING.md (family 6 model 207) in a guest that hides waitpkg, cldemote, movdiri and movdir64b,
# which archspec requires for sapphirerapids.
XEON_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss "
              "ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq "
              "pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx "
              "f16c rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced "
              "fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma "
              "clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 "
              "wbnoinvd arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg "
              "avx512_vpopcntdq rdpid md_clear serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d "
              "arch_capabilities")
AMX = {"amx_tile", "amx_int8", "amx_bf16"}
# Zen 4 (family 25 model 17, Genoa) under the same hypervisor as ZEN5: Zen 5's AVX-VNNI and VP2INTERSECT absent.
ZEN4_FLAGS = set(cpuinfo_fields(ZEN5)["flags"].split()) - {"avx_vnni", "avx512_vp2intersect"}
# Zen 3 (family 25 model 1, Milan), AVX2 only: no AVX-512, GFNI nor AVX-VNNI.
ZEN3_FLAGS = {f for f in ZEN4_FLAGS if not f.startswith("avx512") and f not in ("gfni",)}


def _cpuinfo(vendor: str, family: int, model: int, flags) -> str:
    return (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: a CPU\nflags\t\t: {' '.join(sorted(flags))}\n\n")


@pytest.mark.parametrize("text, name, archspec_says", [
    (ZEN5, "zen5", "x86_64_v4"),
    (_cpuinfo("GenuineIntel", 6, 207, XEON_FLAGS.split()), "sapphirerapids", "icelake"),
    (_cpuinfo("GenuineIntel", 6, 207, set(XEON_FLAGS.split()) - AMX), "sapphirerapids", "icelake"),
    (_cpuinfo("AuthenticAMD", 25, 17, ZEN4_FLAGS), "zen4", "x86_64_v4"),
    (_cpuinfo("AuthenticAMD", 25, 1, ZEN3_FLAGS), "zen3", "x86_64_v3"),
], ids=["this-zen5", "amx-xeon", "xeon-amx-hidden", "zen4", "zen3-avx2"])
def test_the_microarchitecture_follows_the_instruction_sets_reported(text, name, archspec_says):
    """Each CPU named by what it reports, where archspec 0.2.7, missing flags no kernel uses, names it older or
    generic (its answer on the same flags is asserted too: the reason this rule exists)."""
    assert from_cpuinfo(text) == name
    fields = cpuinfo_fields(text)
    assert archspec_name(fields["vendor_id"], fields["flags"].split()) == archspec_says


def test_flags_decide_and_the_model_decides_where_flags_are_hidden():
    xeon = set(XEON_FLAGS.split())
    bare = {f for f in xeon if not f.startswith(("avx512", "amx"))}  # every AVX-512 and AMX flag hidden
    assert name_microarch("GenuineIntel", 6, 207, bare) == "sapphirerapids"  # Emerald Rapids: SPR's ISA
    assert name_microarch("GenuineIntel", 6, 0, bare - {"avx_vnni"}) is not None  # archspec's pick, never an error
    assert name_microarch("GenuineIntel", 6, 0, bare | {"amx_fp16"}) == "graniterapids"
    assert name_microarch("GenuineIntel", 6, 85, bare | {"avx512f", "avx512_vnni"}) == "cascadelake"
    assert name_microarch("GenuineIntel", 6, 85, bare | {"avx512f", "avx512_vnni", "avx512_bf16"}) == "cooperlake"
    assert name_microarch("AuthenticAMD", 25, 17, ZEN3_FLAGS) == "zen4"  # a Genoa with AVX-512 hidden: its model
    assert name_microarch("AuthenticAMD", 26, 2, ZEN4_FLAGS | {"avx512_fp16"}) == "zen6"
    assert name_microarch("AuthenticAMD", 23, 49, ZEN3_FLAGS) == "zen2"
    # No vendor line (ARM's cpuinfo): left to archspec's own detection.
    assert from_cpuinfo("processor\t: 0\nFeatures\t: fp asimd\nCPU part\t: 0xd0c\n") is None


def test_this_machine_and_the_fleet_key_use_it():
    """describe_machine and the fleet's machine type carry the rule's name for this CPU."""
    with open("/proc/cpuinfo") as f:
        expected = from_cpuinfo(f.read())
    machine = describe_machine(2, check_cuda=False)
    assert machine["microarch"] == host_microarch() == expected and expected
    assert machine_type(machine).startswith(f"{expected} (")
    assert isa_from_flags(XEON_FLAGS.split())[-3:] == ["AMX", "AMX-INT8", "AMX-BF16"]
