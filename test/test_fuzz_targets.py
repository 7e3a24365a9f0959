"""The fuzz targets (`make fuzz`: the journal reader; `make fuzz-policy`: the
policy parser) build and run: a harness that no longer matches what it
drives (the reader's log/ made by its first writer since JI_LAZYDIRS) fails
at its first input, which nothing else would notice. Each runs a few
seconds here; `make fuzz FUZZ_SECONDS=N` runs longer."""
import os
import subprocess

import pytest

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def libfuzzer_available(tmp_path):
    probe = subprocess.run(["clang", "-fsanitize=fuzzer", "-x", "c", "-", "-o", str(tmp_path / "probe")],
                           input="int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }",
                           text=True, capture_output=True) if os.path.exists("/usr/bin/clang") else None
    return probe is not None and probe.returncode == 0


@pytest.mark.parametrize("target", ["fuzz", "fuzz-policy"])
def test_the_fuzz_target_builds_and_runs(tmp_path, target):
    if not libfuzzer_available(tmp_path):
        pytest.skip("no clang with libFuzzer")
    r = subprocess.run(["make", "-s", "-C", TOP, f"B={tmp_path / 'b'}", target, "FUZZ_SECONDS=3"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "Done" in r.stderr and "runs in" in r.stderr, r.stderr[-2000:]
