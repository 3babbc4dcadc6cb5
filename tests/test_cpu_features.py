"""t2t_lite.training.cpu_features: bfloat16 support read from /proc/cpuinfo text.

The sample lines follow the formats Linux prints: "flags" on x86 (AVX-512 with and
without the BF16 extension), "Features" on arm64 (Neoverse V1, which has BF16).
"""

from t2t_lite.training import cpu_features

X86_NO_BF16 = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
    "flags\t\t: fpu vme de pse tsc msr fma avx avx2 avx512f avx512dq avx512bw avx512vl "
    "avx512_vnni avx512_bitalg avx512_vpopcntdq\n\nprocessor\t: 1\n"
    "flags\t\t: fpu vme de pse tsc msr fma avx avx2 avx512f avx512_bf16\n"
)
X86_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_tile\n"
ARM64_BF16 = (
    "processor\t: 0\nBogoMIPS\t: 2100.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid "
    "asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm svebf16 i8mm bf16\n"
)


def test_features_come_from_the_first_flags_or_features_line():
    assert "avx512f" in cpu_features.cpu_features(X86_NO_BF16)
    assert "avx512_bf16" not in cpu_features.cpu_features(X86_NO_BF16)  # only CPU 1 lists it
    assert {"bf16", "i8mm"} <= cpu_features.cpu_features(ARM64_BF16)
    assert cpu_features.cpu_features("processor\t: 0\n") == set()


def test_native_bfloat16_per_cpu_and_unknown_when_unreadable(tmp_path):
    for text, expected in ((X86_NO_BF16, False), (X86_BF16, True), (ARM64_BF16, True), ("", None)):
        path = tmp_path / "cpuinfo"
        path.write_text(text)
        assert cpu_features.native_bfloat16(str(path)) is expected
    assert cpu_features.native_bfloat16(str(tmp_path / "missing")) is None


def test_warning_only_for_mixed_bfloat16_on_a_cpu_without_it(tmp_path):
    without, with_bf16 = tmp_path / "without", tmp_path / "with"
    without.write_text(X86_NO_BF16)
    with_bf16.write_text(X86_BF16)
    warning = cpu_features.bfloat16_warning("mixed_bfloat16", True, str(without))
    assert warning.startswith("warning: dtype_policy=mixed_bfloat16 on a CPU without bfloat16")
    assert str(without) in warning and "--hparams=dtype_policy=float32" in warning
    assert cpu_features.bfloat16_warning("mixed_bfloat16", True, str(with_bf16)) is None
    assert cpu_features.bfloat16_warning("float32", True, str(without)) is None
    assert cpu_features.bfloat16_warning("mixed_bfloat16", False, str(without)) is None
    assert cpu_features.bfloat16_warning("mixed_bfloat16", True, str(tmp_path / "gone")) is None
