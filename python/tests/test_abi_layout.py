"""The package speaks the header's ABI: every struct ctypes declares has the
size and field offsets cc gives the one in bin/kvready.h, every enum the
package names has the header's value, and the conformance rules' identifiers
are the ones kvready.h lists."""

from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess

import kvready
from kvready import _abi, errors

ROOT = pathlib.Path(__file__).resolve().parents[2]

STRUCTS = {
    "kvready_group": _abi.Group, "kvready_row": _abi.CRow, "kvready_request": _abi.CRequest,
    "kvready_engine_config": _abi.EngineConfig, "kvready_lease_info": _abi.CLeaseInfo,
    "kvready_interval": _abi.CInterval, "kvready_round": _abi.CRound, "kvready_containment": _abi.CContainment,
    "kvready_stats": _abi.CStats, "kvready_report": _abi.CReport, "kvready_unit": _abi.CUnit,
    "kvready_answer": _abi.CAnswer, "kvready_backend_callbacks": _abi.BackendCallbacks,
    "kvready_device_callbacks": _abi.DeviceCallbacks, "kvready_backend_faults": _abi.CBackendFaults,
    "kvready_cancel_result": _abi.CCancelResult,
    "kvready_tier_stats": _abi.CTierStats,
    "kvready_ucx_config": _abi.CUcxConfig, "kvready_peer_config": _abi.CPeerConfig, "kvready_accessor": _abi.CAccessor,
    "kvready_chunk_group": _abi.CChunkGroup, "kvready_page_ref": _abi.CPageRef, "kvready_peer_plan": _abi.CPeerPlan,
    "kvready_peer_page": _abi.CPeerPage, "kvready_transfer_outcome": _abi.CTransferOutcome,
    "kvready_peer_stats": _abi.CPeerStats,
}


def enums() -> dict[str, int]:
    """The C names of the values the package spells out, with its values."""
    out = {"KVREADY_ABI_VERSION": _abi.ABI_VERSION, "KVREADY_NAME_SIZE": _abi.NAME_SIZE,
           "KVREADY_REASON_SIZE": _abi.REASON_SIZE, "KVREADY_MAX_STATES": _abi.MAX_STATES,
           "KVREADY_TIER_NAME_SIZE": _abi.TIER_NAME_SIZE, "KVREADY_PEER_NAME_SIZE": _abi.PEER_NAME_SIZE,
           "KVREADY_NUM_STATES": len(kvready.State), "KVREADY_NUM_OUTCOMES": len(kvready.OutcomeKind)}
    for s in kvready.State:
        out["KVREADY_" + (s.name if s != kvready.State.FAILED else "FAILED_STATE")] = s.value
    for o in kvready.OutcomeKind:
        out["KVREADY_OUTCOME_" + o.name] = o.value
    for p in kvready.Policy:
        out["KVREADY_POLICY_" + p.name] = p.value
    for u in kvready.Until:
        out["KVREADY_UNTIL_" + u.name] = u.value
    for d in kvready.CancelDisposition:
        out["KVREADY_CANCEL_" + d.name] = d.value
    for a in kvready.Access:
        out["KVREADY_ACCESS_" + a.name] = a.value
    for ls in kvready.LayerStatus:
        out["KVREADY_LAYER_" + ls.name] = ls.value
    for ph in kvready.Physical:
        out["KVREADY_" + ph.name] = ph.value
    for lg in kvready.Logical:
        out["KVREADY_LOGICAL_" + lg.name] = lg.value
    for ev in kvready.EventStatus:
        out["KVREADY_EVENT_" + ev.name] = ev.value
    for k in kvready.Kind:
        out["KVREADY_" + k.name] = k.value
    for prefix, enum in (("KVREADY_UCX_", kvready.Mode), ("KVREADY_ROLE_", kvready.Role), ("KVREADY_CACHE_", kvready.CacheKind),
                         ("KVREADY_TRANSFER_", kvready.TransferKind)):
        for v in enum:
            out[prefix + v.name] = v.value
    for name, v in vars(errors).items():
        if name.isupper() and isinstance(v, int):
            out["KVREADY_OK" if name == "OK" else "KVREADY_ERR_" + name] = v
    return out


def test_structs_and_enums_match_the_header(tmp_path):
    cc = os.environ.get("CC", "cc")
    assert shutil.which(cc), f"no C compiler ({cc}): sudo apt-get install -y gcc"
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kvready.h"', "int main(void) {"]
    for c, py in STRUCTS.items():
        lines.append(f'  printf("{c} %zu\\n", sizeof({c}));')
        for f in py._fields_:
            lines.append(f'  printf("{c}.{f[0]} %zu\\n", offsetof({c}, {f[0]}));')
    for name in enums():
        lines.append(f'  printf("{name} %lld\\n", (long long){name});')
    lines += ["  return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines) + "\n")
    build = subprocess.run([cc, "-Wall", "-Werror", "-o", "layout", "layout.c", f"-I{ROOT / 'bin'}"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    out = subprocess.run(["./layout"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    c = dict(line.rsplit(" ", 1) for line in out.stdout.splitlines())

    py: dict[str, int] = {}
    for name, s in STRUCTS.items():
        py[name] = ctypes.sizeof(s)
        for f in s._fields_:
            py[f"{name}.{f[0]}"] = getattr(s, f[0]).offset
    py.update(enums())
    wrong = {k: (v, int(c[k])) for k, v in py.items() if int(c[k]) != v}
    assert not wrong, f"(package, header) differ: {wrong}"


def test_the_rule_identifiers_are_the_headers():
    header = (ROOT / "cabi" / "kvready.h").read_text()
    i = header.index("The identifiers:") + len("The identifiers:")
    listed = header[i:header.index("(rule is empty", i)].replace("*", " ").split()
    assert tuple(listed) == kvready.conformance.RULES
