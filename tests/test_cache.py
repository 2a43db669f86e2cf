"""The persistent kernel cache, on CPU: the library's probe kernel goes through the
same cache path as every kernel (lower, serialize, look up, tileiras on a miss,
store), so these tests drive it with a stand-in tileiras that logs each compile
and then runs the real one, and can stall so a writer can be killed mid-compile."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tilegym_cutile_rs import _cache, _toolchain

try:
    REAL_TILEIRAS = _toolchain.find().tileiras
except _toolchain.ToolchainError as exc:  # the test extra installs the pip kit
    pytest.skip(f"needs the Tile IR toolchain: {exc}", allow_module_level=True)

PROBE = """
import json, os, sys
from tilegym_cutile_rs import _cache, _library, _toolchain
lib = _library.library()
tc = _toolchain.configure()
_cache.enable(lib, tc)
os.environ["CUTILE_TILEIRAS_PATH"] = os.environ["STANDIN_TILEIRAS"]
for arch in sys.argv[1:] or ["sm_90"]:
    status = lib.cutile_compile_probe(arch.encode())
    if status:
        print(_library.last_error(), file=sys.stderr)
        raise SystemExit(1)
print(json.dumps({"stats": _cache.stats(), "reason": _cache.disabled_reason()}))
"""


@pytest.fixture
def standin(tmp_path: Path) -> Path:
    log = tmp_path / "compiles.log"
    script = tmp_path / "tileiras"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            case " $* " in *" -o "*)
              echo "$$" >> {log}
              if [ -n "$STANDIN_SLEEP" ]; then sleep "$STANDIN_SLEEP"; fi;;
            esac
            exec {REAL_TILEIRAS} "$@"
            """
        )
    )
    script.chmod(0o755)
    return script


def compiles(standin: Path) -> int:
    log = standin.parent / "compiles.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def env_for(cache: Path | str, standin: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, _cache.DIR_ENV: str(cache), "STANDIN_TILEIRAS": str(standin), **extra}


def probe(env: dict[str, str], *archs: str) -> dict:
    p = subprocess.run([sys.executable, "-c", PROBE, *archs], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def entries(cache: Path) -> list[_cache.Entry]:
    return _cache.entries(cache)


def test_second_process_runs_no_tileiras(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    first = probe(env_for(cache, standin))["stats"]
    assert (first["misses"], first["puts"], first["tileiras_runs"]) == (1, 1, 1)
    second = probe(env_for(cache, standin))["stats"]
    assert (second["hits"], second["tileiras_runs"]) == (1, 0)
    assert compiles(standin) == 1
    [entry] = entries(cache)
    assert entry.valid and entry.gpu_name == "sm_90"


def test_directory_is_user_only(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "new" / "cache"
    probe(env_for(cache, standin))
    for d in (cache, cache / _cache.KERNELS):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_directory_others_can_write_is_refused(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    out = probe(env_for(cache, standin))
    assert "writable by other users" in out["reason"] and "chmod 700" in out["reason"]
    assert out["stats"]["puts"] == 0 and entries(cache) == []


def test_concurrent_writers_leave_one_valid_entry(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    env = env_for(cache, standin, STANDIN_SLEEP="1")  # all of them miss, compile and store at once
    procs = [subprocess.Popen([sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    [entry] = entries(cache)
    assert entry.valid
    assert not [p for p in (cache / _cache.KERNELS).rglob("*") if ".tmp." in p.name]
    before = compiles(standin)
    assert probe(env_for(cache, standin))["stats"]["hits"] == 1
    assert compiles(standin) == before


def test_killed_writer_leaves_nothing_corrupt(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    env = env_for(cache, standin, STANDIN_SLEEP="30")
    p = subprocess.Popen([sys.executable, "-c", PROBE], env=env, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while compiles(standin) == 0:  # killed while its tileiras runs
        assert time.monotonic() < deadline and p.poll() is None, "the writer never reached tileiras"
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    assert entries(cache) == []
    leftovers = [q for q in (cache / _cache.KERNELS).rglob("*") if q.is_file()]
    assert leftovers == []
    out = probe(env_for(cache, standin))["stats"]
    assert out["puts"] == 1
    [entry] = entries(cache)
    assert entry.valid


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_entry_is_recompiled(tmp_path: Path, standin: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    probe(env_for(cache, standin))
    [entry] = entries(cache)
    data = bytearray(entry.path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-10] ^= 0xFF
    entry.path.write_bytes(bytes(data))
    assert not _cache.read_entry(entry.path).valid
    out = probe(env_for(cache, standin))["stats"]
    assert (out["hits"], out["tileiras_runs"], out["puts"]) == (0, 1, 1)
    assert compiles(standin) == 2
    [again] = entries(cache)
    assert again.valid


def test_eviction_keeps_the_cap(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    probe(env_for(cache, standin), "sm_90")
    size = entries(cache)[0].size
    cap = int(size * 2.5)
    archs = ["sm_80", "sm_86", "sm_89", "sm_100", "sm_120"]
    probe(env_for(cache, standin, **{_cache.SIZE_ENV: str(cap)}), *archs)
    kept = entries(cache)
    assert sum(e.size for e in kept) <= cap
    assert 1 <= len(kept) <= 2
    assert kept[0].gpu_name == archs[-1]  # the newest survives; the oldest went first


@pytest.mark.parametrize("value", ["off", "0"])
def test_disabled_cache_writes_nothing(tmp_path: Path, standin: Path, value: str) -> None:
    env = env_for(value, standin, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    for _ in range(2):
        out = probe(env)
        assert out["stats"]["puts"] == 0 and out["stats"]["tileiras_runs"] == 1
        assert "disabled" in out["reason"]
    assert compiles(standin) == 2
    assert not (tmp_path / "xdg").exists()


def test_default_location_is_the_user_cache_dir(tmp_path: Path, standin: Path) -> None:
    env = {k: v for k, v in env_for("", standin).items() if k != _cache.DIR_ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    probe(env)
    assert (tmp_path / "xdg" / "tilegym-cutile-rs" / _cache.KERNELS).is_dir()


def test_cli_info_list_clear(tmp_path: Path, standin: Path) -> None:
    cache = tmp_path / "cache"
    probe(env_for(cache, standin))
    env = env_for(cache, standin)

    def cli(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "tilegym_cutile_rs.cache", *args, "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    info = cli("info")
    assert info["entries"] == 1 and info["bytes"] > 0 and info["invalid"] == 0 and info["root"] == str(cache)
    [kernel] = cli("list")["kernels"]
    assert kernel["gpu"] == "sm_90" and kernel["valid"]
    assert cli("clear")["removed"] == 1
    assert cli("info")["entries"] == 0
    text = subprocess.run([sys.executable, "-m", "tilegym_cutile_rs.cache"], env=env, capture_output=True, text=True).stdout
    assert str(cache) in text and "entries        0" in text


def test_cli_reports_an_unusable_directory(tmp_path: Path) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    p = subprocess.run([sys.executable, "-m", "tilegym_cutile_rs.cache"], env={**os.environ, _cache.DIR_ENV: str(cache)},
                       capture_output=True, text=True)
    assert p.returncode == 2 and "writable by other users" in p.stdout


AUTOTUNE_WRITER = """
import sys
from tilegym_cutile_rs import _autotune
for i in range(int(sys.argv[2])):
    _autotune.record(f"{sys.argv[1]}-{i}", [1, 2 ** (i % 10), 0])
"""


def test_autotune_decisions_survive_concurrent_writers(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, _cache.DIR_ENV: str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", AUTOTUNE_WRITER, f"w{w}", "25"], env=env) for w in range(6)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    data = json.loads((cache / _cache.AUTOTUNE_FILE).read_text())
    assert len(data["decisions"]) == 150
    check = subprocess.run(
        [sys.executable, "-c", "from tilegym_cutile_rs import _autotune; print(_autotune.lookup('w3-7'))"],
        env=env, capture_output=True, text=True,
    )
    assert check.stdout.strip() == "(1, 128, 0)"


def test_autotune_writer_killed_holding_the_lock_blocks_nobody(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, _cache.DIR_ENV: str(cache)}
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from pathlib import Path
            from filelock import FileLock
            Path({str(cache)!r}).mkdir(mode=0o700, parents=True, exist_ok=True)
            lock = FileLock({str(cache / _cache.AUTOTUNE_FILE)!r} + ".lock")
            lock.acquire()
            print("locked", flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait()
    subprocess.run([sys.executable, "-c", AUTOTUNE_WRITER, "after", "1"], env=env, check=True, timeout=30)
    assert "after-0" in json.loads((cache / _cache.AUTOTUNE_FILE).read_text())["decisions"]


def test_corrupt_autotune_file_is_ignored_and_rewritten(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / _cache.AUTOTUNE_FILE).write_text('{"format": 1, "decisions": {"x": [1, 2')
    env = {**os.environ, _cache.DIR_ENV: str(cache)}
    subprocess.run([sys.executable, "-c", AUTOTUNE_WRITER, "fresh", "1"], env=env, check=True, timeout=30)
    assert json.loads((cache / _cache.AUTOTUNE_FILE).read_text())["decisions"] == {"fresh-0": [1, 1, 0]}


def test_the_salt_pins_the_toolchain_not_the_library_abi() -> None:
    # Entries stay valid across library builds that add or change other ops: a cubin is a
    # function of its bytecode (cutile's key), and warm-start entries carry their op's ABI.
    from tilegym_cutile_rs import _library

    tc = _toolchain.configure()
    salt = _cache.salt(tc)
    assert _library.manifest().FINGERPRINT not in salt
    assert all(f"{k}={v}" in salt for k, v in tc.versions.items()), salt
