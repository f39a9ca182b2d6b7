"""The ctypes declarations in kvpool._lib against the C header they mirror
(bindings/c/include/kvpool/c_api.h and the parts it includes).

Drift between the two is a silent memory bug, not a build error: these tests make it a test
failure. Every exported function is declared with the same number and kinds of arguments and
the same result; every callback type agrees with its typedef; every struct has the C layout
(sizeof and each field's offsetof, compiled by the platform's C compiler), its fields named and
ordered as in C."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from kvpool import _lib, layout, transfer

HEADER = os.path.join(
    os.path.dirname(__file__), "..", "..", "c", "include", "kvpool", "c_api.h"
)
# c_api.h and the parts it includes (a new part is found by its #include line)
with open(HEADER) as _f:
    HEADERS = [HEADER] + [
        os.path.join(os.path.dirname(HEADER), part)
        for part in re.findall(r'^#include "(c_api_\w+\.h)"', _f.read(), re.M)
    ]

# ctypes class -> the C typedef it mirrors
STRUCTS = {
    _lib.SubPoolSpec: "kvpool_sub_pool_spec",
    _lib.AllocatorOptions: "kvpool_allocator_options",
    _lib.AllocatorInfo: "kvpool_allocator_info",
    _lib.AllocatorState: "kvpool_allocator_state",
    _lib.AllocatorCounters: "kvpool_allocator_counters",
    _lib.SWASizes: "kvpool_swa_sizes",
    _lib.EvictionShortfall: "kvpool_eviction_shortfall",
    _lib.MambaSizes: "kvpool_mamba_sizes",
    _lib.MambaSWASizes: "kvpool_mamba_swa_sizes",
    _lib.HybridReqToTokenPoolOptions: "kvpool_hybrid_req_to_token_pool_options",
    transfer.ByteRun: "kvpool_byte_run",
    transfer.CopyRun: "kvpool_copy_run",
    transfer._Layout: "kvpool_sub_pool_transfer_layout",
    transfer._Info: "kvpool_transfer_info",
    layout.ViewDescriptor: "kvpool_view_descriptor",
    layout.MHAViewGeometry: "kvpool_mha_view_geometry",
    layout.MLAViewGeometry: "kvpool_mla_view_geometry",
    layout.MambaViewGeometry: "kvpool_mamba_view_geometry",
    layout.MambaStateViewGeometry: "kvpool_mamba_state_view_geometry",
}

CALLBACKS = {
    "kvpool_move_fn": _lib.MOVE_FN,
    "kvpool_query_fn": _lib.QUERY_FN,
    "kvpool_release_fn": _lib.RELEASE_FN,
    "kvpool_evict_fn": _lib.EVICT_FN,
}


def _header_text():
    text = ""
    for header in HEADERS:
        with open(header) as f:
            text += f.read() + "\n"
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"^\s*#.*$", " ", text, flags=re.M)


def _c_kind(declaration):
    """The ABI kind of a C parameter or result: ptr, fn, i64, int, f64 or void."""
    declaration = declaration.replace("const ", " ").strip()
    if "*" in declaration:
        return "ptr"
    words = declaration.split()
    base = words[0] if words else ""
    if base in CALLBACKS:
        return "fn"
    kinds = {
        "int64_t": "i64",
        "int": "int",
        "kvpool_status": "int",
        "double": "f64",
        "void": "void",
    }
    assert base in kinds, f"c_api.h: a type this test does not know: {declaration!r}"
    return kinds[base]


def _ctypes_kind(t):
    if t is None:
        return "void"
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):
        return "fn"
    if t in (ctypes.c_void_p, ctypes.c_char_p) or (
        isinstance(t, type) and issubclass(t, ctypes._Pointer)
    ):
        return "ptr"
    kinds = {ctypes.c_int64: "i64", ctypes.c_int: "int", ctypes.c_double: "f64"}
    assert t in kinds, f"kvpool._lib: a ctypes type this test does not know: {t!r}"
    return kinds[t]


def _split_params(params):
    params = params.strip()
    if params in ("", "void"):
        return []
    return [p.strip() for p in params.split(",")]


def _param_kind(param):
    # Drop the parameter's name: the last word, unless the declaration is the type alone.
    param = re.sub(r"\s+", " ", param)
    match = re.match(r"^(.*?[\s*])(\w+)$", param)
    declaration = match.group(1) if match and match.group(1).strip() else param
    return _c_kind(declaration)


def _exported_functions():
    pattern = re.compile(
        r"KVPOOL_C_EXPORT\s+([\w\s\*]+?)\s*\b(kvpool_\w+)\s*\(([^)]*)\)\s*;", re.S
    )
    return {
        name: (_c_kind(result), [_param_kind(p) for p in _split_params(params)])
        for result, name, params in pattern.findall(_header_text())
    }


def _callback_typedefs():
    pattern = re.compile(
        r"typedef\s+([\w\s\*]+?)\s*\(\s*\*\s*(kvpool_\w+_fn)\s*\)\s*\(([^)]*)\)\s*;", re.S
    )
    return {
        name: (_c_kind(result), [_param_kind(p) for p in _split_params(params)])
        for result, name, params in pattern.findall(_header_text())
    }


def _struct_fields():
    """typedef struct { ... } name; -> the field names in order."""
    structs = {}
    declarations = re.findall(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", _header_text(), re.S)
    for body, name in declarations:
        fields = []
        for declaration in body.split(";"):
            declaration = declaration.strip()
            if not declaration:
                continue
            # An array field's name precedes its extent: int64_t shape[KVPOOL_VIEW_MAX_DIMS].
            declaration = re.sub(r"\[[^\]]*\]", "", declaration)
            first, *more = [d.strip() for d in declaration.split(",")]
            fields.append(re.findall(r"\w+", first)[-1])
            fields.extend(more)
        structs[name] = fields
    return structs


def test_every_exported_function_is_declared_with_the_headers_signature():
    exported = _exported_functions()
    assert len(exported) > 100, "the header parse found too few functions"
    declared = _lib._SIGNATURES
    assert sorted(set(exported) - set(declared)) == [], "in c_api.h, not declared in kvpool._lib"
    assert sorted(set(declared) - set(exported)) == [], "declared in kvpool._lib, not in c_api.h"
    mismatches = []
    for name, (result, params) in exported.items():
        fn = getattr(_lib.lib, name)
        ours = ([_ctypes_kind(t) for t in fn.argtypes], _ctypes_kind(fn.restype))
        if ours != (params, result):
            mismatches.append(f"{name}: C ({params} -> {result}), ctypes ({ours[0]} -> {ours[1]})")
    assert mismatches == []


def test_the_kv_handle_has_one_entry_point_per_op_for_every_allocator():
    """c_api_kv.h is read (found by c_api.h's #include lines): each composite gives a KV handle,
    and every op is declared once, for all of them."""
    exported = _exported_functions()
    assert any(h.endswith("c_api_kv.h") for h in HEADERS)
    makers = {"kvpool_multi_ended_allocator_kv", "kvpool_unified_swa_allocator_kv", "kvpool_unified_mamba_allocator_kv",
              "kvpool_unified_mamba_swa_allocator_kv"}
    assert makers <= set(exported)
    ops = {name for name in exported if name.startswith("kvpool_kv_")}
    assert {"kvpool_kv_alloc_decode", "kvpool_kv_free", "kvpool_kv_gate_transfer"} <= ops
    for name in ops:  # the handle is the first argument of each
        assert exported[name][1][0] == "ptr", name


def test_every_callback_type_matches_its_typedef():
    typedefs = _callback_typedefs()
    assert sorted(typedefs) == sorted(CALLBACKS)
    for name, (result, params) in typedefs.items():
        fn = CALLBACKS[name]
        assert [_ctypes_kind(t) for t in fn._argtypes_] == params, name
        assert _ctypes_kind(fn._restype_) == result, name


def test_every_struct_has_its_c_fields_in_order():
    c_structs = _struct_fields()
    assert sorted(c_structs) == sorted(STRUCTS.values()), "a C struct without a ctypes mirror"
    for cls, c_name in STRUCTS.items():
        assert [f[0] for f in cls._fields_] == c_structs[c_name], c_name


def test_every_struct_has_the_c_layout(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to measure the C layout")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kvpool/c_api.h"']
    lines.append("int main(void) {")
    for cls, c_name in STRUCTS.items():
        lines.append(f'    printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        for field, _ in cls._fields_:
            lines.append(f'    printf("{c_name} {field} %zu\\n", offsetof({c_name}, {field}));')
    lines += ["    return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    program = tmp_path / "layout"
    include = os.path.join(os.path.dirname(HEADER), "..")
    build = [compiler, "-std=c11", "-I", include, str(source), "-o", str(program)]
    subprocess.run(build, check=True)
    output = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    measured = {}
    for line in output.splitlines():
        c_name, what, value = line.split()
        measured[(c_name, what)] = int(value)
    for cls, c_name in STRUCTS.items():
        assert ctypes.sizeof(cls) == measured[(c_name, "sizeof")], c_name
        for field, _ in cls._fields_:
            assert getattr(cls, field).offset == measured[(c_name, field)], f"{c_name}.{field}"
