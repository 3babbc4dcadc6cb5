"""Whether this machine's CPU multiplies bfloat16 natively, read from /proc/cpuinfo.

TensorFlow runs `mixed_bfloat16` products on any CPU, but only CPUs with bfloat16
instructions run them faster than float32: x86 with AVX512_BF16 or AMX-BF16, Arm with
the BF16 extension. Elsewhere oneDNN converts every operand to float32 and back, and
a mixed_bfloat16 step is several times slower than a float32 one.
"""

from __future__ import annotations

CPUINFO = "/proc/cpuinfo"
# Feature names as Linux lists them: x86 "flags" lines, Arm "Features" lines.
BFLOAT16_FEATURES = {"avx512_bf16", "amx_bf16", "bf16"}
# What a tool's --dtype_policy takes: the hparams set's own policy, the machine's choice, or one.
POLICY_CHOICES = ("set", "auto", "float32", "mixed_bfloat16")


def cpu_features(cpuinfo_text: str) -> set:
    """The feature names of the first "flags" or "Features" line of /proc/cpuinfo text."""
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def native_bfloat16(cpuinfo_path: str | None = None) -> bool | None:
    """True / False whether the CPU has bfloat16 instructions; None if it cannot be told.

    Reads `cpuinfo_path`, by default the module's `CPUINFO`.
    """
    cpuinfo_path = cpuinfo_path or CPUINFO
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            features = cpu_features(f.read())
    except OSError:
        return None
    if not features:
        return None
    return bool(features & BFLOAT16_FEATURES)


def bfloat16_warning(
    dtype_policy: str, on_cpu: bool, cpuinfo_path: str | None = None
) -> str | None:
    """A one-line warning when `mixed_bfloat16` will run on a CPU without bfloat16 instructions."""
    cpuinfo_path = cpuinfo_path or CPUINFO
    if dtype_policy != "mixed_bfloat16" or not on_cpu:
        return None
    if native_bfloat16(cpuinfo_path) is not False:
        return None
    return (
        "warning: dtype_policy=mixed_bfloat16 on a CPU without bfloat16 instructions (none of "
        f"{', '.join(sorted(BFLOAT16_FEATURES))} in {cpuinfo_path}): its products are converted "
        "to float32 and back, slower than float32 itself; --hparams=dtype_policy=float32 trains "
        "faster here"
    )


def training_policy(
    choice: str, default: str, has_gpu: bool, cpuinfo_path: str | None = None
) -> str:
    """The policy to train in, for a tool's `--dtype_policy` (one of `POLICY_CHOICES`).

    "set" keeps `default` (the hparams set's); "auto" picks `mixed_bfloat16` on a CPU with
    bfloat16 instructions, where a step runs about twice as fast, and `default` elsewhere
    (emulated bfloat16 is slower than float32; GPUs keep the set's policy); any other
    choice is used as it is.
    """
    if choice == "set":
        return default
    if choice != "auto":
        return choice
    if has_gpu or not native_bfloat16(cpuinfo_path):
        return default
    return "mixed_bfloat16"


def training_hparams(
    hparams_set: str,
    choice: str,
    overrides: str = "",
    has_gpu: bool = False,
    cpuinfo_path: str | None = None,
):
    """`hparams_set` in the policy `training_policy` picks for `choice`.

    `overrides` ("name=value,...") come last, so an explicit `dtype_policy=` in them wins.
    """
    from t2t_lite import hparams as hparams_lib

    hp = hparams_lib.get(hparams_set)
    policy = training_policy(choice, hp.dtype_policy, has_gpu, cpuinfo_path)
    return hparams_lib.override(hp, ",".join(filter(None, [f"dtype_policy={policy}", overrides])))
