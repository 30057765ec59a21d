#!/usr/bin/env python3
"""Writes tandem's mpi.h from the MPI library's sources.

The constants come from mpi/src/abi.rs (MPICH's values), the prototypes
from the functions the library implements (the `export!` blocks and the
plain `extern "C"` functions of mpi/src; the refusing stubs of
unsupported.rs are left out). `--check` compares with the committed
mpi/include/mpi.h instead of writing it, so the header cannot drift from
the library (scripts/test-mpi.sh runs it). It also writes README's table
of supported functions.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "mpi" / "src"
HEADER = ROOT / "mpi" / "include" / "mpi.h"

RENAME = {
    "TWO_INT": "MPI_2INT", "TWO_INTEGER": "MPI_2INTEGER", "TWO_REAL": "MPI_2REAL",
    "TWO_DOUBLE_PRECISION": "MPI_2DOUBLE_PRECISION", "X_C_FLOAT16": "MPIX_C_FLOAT16",
    "X_ERR_PROC_FAILED": "MPIX_ERR_PROC_FAILED",
    "X_ERR_PROC_FAILED_PENDING": "MPIX_ERR_PROC_FAILED_PENDING",
    "X_ERR_REVOKED": "MPIX_ERR_REVOKED",
}
SKIP = {"STATUS_IGNORE", "IN_PLACE"}
KIND = {0x4c: "MPI_Datatype", 0x8c: "MPI_Datatype", 0x0c: "MPI_Datatype",
        0x44: "MPI_Comm", 0x04: "MPI_Comm", 0x58: "MPI_Op", 0x18: "MPI_Op",
        0x54: "MPI_Errhandler", 0x14: "MPI_Errhandler", 0x2c: "MPI_Request",
        0x6c: "MPI_Message", 0x48: "MPI_Group", 0x08: "MPI_Group",
        0x1c: "MPI_Info", 0x5c: "MPI_Info", 0x20: "MPI_Win"}


def constants():
    out = []
    for m in re.finditer(r"pub const (\w+): (\w+) = ([^;]+);", (SRC / "abi.rs").read_text()):
        name, ty, val = m.groups()
        if name in SKIP or ty not in ("Handle", "c_int", "usize"):
            continue
        val = val.replace("_", "").replace("u32 as Handle", "").strip()
        cname = RENAME.get(name, "MPI_" + name)
        if name == "MESSAGE_NULL":
            cname = "MPI_MESSAGE_NULL"
        v = int(val, 0)
        kind = KIND.get((v >> 24) & 0xff) if ty == "Handle" and v > 0xffffff else None
        if ty == "Handle" and kind:
            out.append(f"#define {cname} (({kind}){val})")
        else:
            out.append(f"#define {cname} ({val})")
    return out


def c_type(fn, arg, ty):
    ty = ty.replace("abi::", "").replace("crate::op::", "").replace("crate::state::", "").strip()
    simple = {
        "c_int": "int", "*mut c_int": "int *", "*const c_int": "const int *",
        "*const c_void": "const void *", "*mut c_void": "void *",
        "*mut Status": "MPI_Status *", "*const Status": "const MPI_Status *",
        "Aint": "MPI_Aint", "*mut Aint": "MPI_Aint *", "*const Aint": "const MPI_Aint *",
        "Count": "MPI_Count", "*mut Count": "MPI_Count *", "isize": "MPI_Aint",
        "*mut *mut *mut c_char": "char ***", "*mut c_char": "char *",
        "*const c_char": "const char *", "c_double": "double",
        "Option<ErrFn>": "MPI_Comm_errhandler_function *",
        "Option<CopyFn>": "MPI_Comm_copy_attr_function *",
        "Option<DeleteFn>": "MPI_Comm_delete_attr_function *",
        "Option<UserFn>": "MPI_User_function *",
        "Option<GreqQuery>": "MPI_Grequest_query_function *",
        "Option<GreqFree>": "MPI_Grequest_free_function *",
        "Option<GreqCancel>": "MPI_Grequest_cancel_function *",
        "*const [c_int; 3]": "int (*)[3]",
        "FileH": "MPI_File", "*mut FileH": "MPI_File *",
        "Option<DatarepConv>": "MPI_Datarep_conversion_function *",
        "Option<DatarepExtent>": "MPI_Datarep_extent_function *",
        "Offset": "MPI_Offset", "*mut Offset": "MPI_Offset *",
        "Option<CopyFn>": "MPI_Comm_copy_attr_function *",
    }
    if fn == "MPI_Win_create_errhandler" and ty == "Option<ErrFn>":
        return "MPI_Win_errhandler_function *"
    if ty in ("TObj", "*mut TObj"):
        a = arg.lstrip("_")
        k = {"session": "MPI_T_pvar_session", "enumtype": "MPI_T_enum"}.get(a)
        if a == "handle":
            k = "MPI_T_cvar_handle" if "cvar" in fn else "MPI_T_pvar_handle"
        if k is None:
            raise SystemExit(f"{fn}: which MPI_T object is {arg}?")
        return k + (" *" if ty.startswith("*mut") else "")
    for kind in ("Type", "Win"):
        if fn == f"MPI_{kind}_create_keyval" and ty == "Option<CopyFn>":
            return f"MPI_{kind}_copy_attr_function *"
        if fn == f"MPI_{kind}_create_keyval" and ty == "Option<DeleteFn>":
            return f"MPI_{kind}_delete_attr_function *"
    if fn == "MPI_File_create_errhandler" and ty == "Option<ErrFn>":
        return "MPI_File_errhandler_function *"
    if ty in simple:
        return simple[ty]
    base = ty.replace("*mut ", "").replace("*const ", "")
    ptr = " *" if ty.startswith("*mut") else (" const *" if ty.startswith("*const") else "")
    if base != "Handle":
        raise SystemExit(f"{fn}: no C type for {arg}: {ty}")
    a = arg.lstrip("_")
    if a in ("comm", "newcomm"):
        k = "MPI_Comm"
    elif a in ("dt", "sdt", "rdt", "old", "ts", "st", "rt", "sts", "rts", "tdt", "etype", "filetype", "datatype"):
        k = "MPI_Datatype"
    elif a == "op":
        k = "MPI_Op"
    elif a == "info":
        k = "MPI_Info"
    elif a in ("group", "failedgrp"):
        k = "MPI_Group"
    elif a in ("r", "rs", "req"):
        k = "MPI_Request"
    elif a == "win":
        k = "MPI_Win"
    elif a == "msg":
        k = "MPI_Message"
    elif a == "parent":
        k = "MPI_Comm"
    elif fn.startswith("MPI_Info_") or fn == "MPI_Comm_get_info":
        k = "MPI_Info"
    elif fn.startswith("MPI_Type_"):
        k = "MPI_Datatype"
    elif fn.startswith("MPI_Group_"):
        k = "MPI_Group"
    elif "rrhandler" in fn and a == "h":
        k = "MPI_Errhandler"
    elif fn.startswith("MPI_Request_") and a == "h":
        k = "MPI_Request"
    elif fn.startswith(("MPI_Comm_", "MPIX_Comm_", "MPI_Intercomm_")):
        k = "MPI_Comm"
    else:
        raise SystemExit(f"{fn}: which handle is {arg}?")
    return k + ptr


def functions():
    found = {}
    for path in sorted(SRC.glob("*.rs")):
        if path.name == "unsupported.rs":
            continue
        text = path.read_text()
        for m in re.finditer(r"fn (MPIX?_\w+), PMPIX?_\w+\(([^)]*)\) -> c_int", text):
            found[m.group(1)] = ("int", m.group(2))
        # Non-blocking collectives that run the blocking call within the
        # call (extra.rs, `completes_now!`): the macro adds the request.
        # Persistent collectives (`persistent_coll!`, names ending in
        # `_init`): the info, then the request.
        for m in re.finditer(r"(MPI_\w+), PMPI_\w+, [\w:]+ => \(([^)]*)\) comm = \w+(?:, keep [^;]*)?;", text):
            extra = ", info: Handle" if m.group(1).endswith("_init") else ""
            found[m.group(1)] = ("int", m.group(2) + extra + ", req: *mut Handle")
        for m in re.finditer(r'pub (?:unsafe )?extern "C" fn (MPI_\w+)\(([^)]*)\)(?: -> (\w+))?', text):
            ret = {"c_int": "int", "c_double": "double", "Aint": "MPI_Aint",
                   "FileH": "MPI_File"}.get(m.group(3) or "c_int")
            found[m.group(1)] = (ret, m.group(2))
    protos = []
    for fn in sorted(found):
        ret, args = found[fn]
        parts = []
        for a in [x.strip() for x in args.split(",") if x.strip()]:
            name, ty = a.split(":", 1)
            parts.append(c_type(fn, name.strip(), ty))
        protos.append(f"{ret} {fn}({', '.join(parts) or 'void'});")
        protos.append(f"{ret} P{fn}({', '.join(parts) or 'void'});")
    return sorted(found), protos


def header():
    names, protos = functions()
    lines = [
        "/* tandem's MPI header: MPICH's binary interface (libmpich.so.12).",
        " * Generated by scripts/mpi-header.py from mpi/src: the constants are",
        " * MPICH's values, the prototypes what tandem implements. Programs built",
        " * against MPICH's own mpi.h run on tandem too. */",
        "#ifndef TANDEM_MPI_H",
        "#define TANDEM_MPI_H",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "typedef int MPI_Comm;", "typedef int MPI_Datatype;", "typedef int MPI_Op;",
        "typedef int MPI_Request;", "typedef int MPI_Group;", "typedef int MPI_Errhandler;",
        "typedef int MPI_Info;", "typedef int MPI_Win;", "typedef int MPI_Message;",
        "typedef long MPI_Aint;", "typedef long MPI_Count;", "typedef long MPI_Offset;",
        "typedef int MPI_Fint;",
        "typedef struct tandem_file *MPI_File;",
        "typedef struct tandem_t_enum *MPI_T_enum;",
        "typedef struct tandem_t_cvar *MPI_T_cvar_handle;",
        "typedef struct tandem_t_pvar *MPI_T_pvar_handle;",
        "typedef struct tandem_t_session *MPI_T_pvar_session;",
        "typedef struct MPI_Status {",
        "    int count_lo;", "    int count_hi_and_cancelled;",
        "    int MPI_SOURCE;", "    int MPI_TAG;", "    int MPI_ERROR;",
        "} MPI_Status;",
        "typedef void (MPI_User_function)(void *, void *, int *, MPI_Datatype *);",
        "typedef void (MPI_Comm_errhandler_function)(MPI_Comm *, int *, ...);",
        "typedef void (MPI_Win_errhandler_function)(MPI_Win *, int *, ...);",
        "typedef void (MPI_File_errhandler_function)(MPI_File *, int *, ...);",
        "typedef int (MPI_Datarep_conversion_function)(void *, MPI_Datatype, int, void *, MPI_Offset, void *);",
        "typedef int (MPI_Datarep_extent_function)(MPI_Datatype, MPI_Aint *, void *);",
        "#define MPI_CONVERSION_FN_NULL ((MPI_Datarep_conversion_function *)0)",
        "typedef int (MPI_Comm_copy_attr_function)(MPI_Comm, int, void *, void *, void *, int *);",
        "typedef int (MPI_Comm_delete_attr_function)(MPI_Comm, int, void *, void *);",
        "typedef int (MPI_Type_copy_attr_function)(MPI_Datatype, int, void *, void *, void *, int *);",
        "typedef int (MPI_Type_delete_attr_function)(MPI_Datatype, int, void *, void *);",
        "typedef int (MPI_Win_copy_attr_function)(MPI_Win, int, void *, void *, void *, int *);",
        "typedef int (MPI_Win_delete_attr_function)(MPI_Win, int, void *, void *);",
        "typedef int (MPI_Grequest_query_function)(void *, MPI_Status *);",
        "typedef int (MPI_Grequest_free_function)(void *);",
        "typedef int (MPI_Grequest_cancel_function)(void *, int);",
        "",
        "#define MPI_VERSION 3",
        "#define MPI_SUBVERSION 1",
        "#define TANDEM_MPI 1",
        "#define MPI_STATUS_IGNORE ((MPI_Status *)1)",
        "#define MPI_STATUSES_IGNORE ((MPI_Status *)1)",
        "#define MPI_IN_PLACE ((void *)-1)",
        "#define MPI_BOTTOM ((void *)0)",
        "#define MPI_FILE_NULL ((MPI_File)0)",
        "#define MPI_T_ENUM_NULL ((MPI_T_enum)0)",
        "#define MPI_T_CVAR_HANDLE_NULL ((MPI_T_cvar_handle)0)",
        "#define MPI_T_PVAR_HANDLE_NULL ((MPI_T_pvar_handle)0)",
        "#define MPI_T_PVAR_SESSION_NULL ((MPI_T_pvar_session)0)",
        "extern MPI_T_pvar_handle const MPI_T_PVAR_ALL_HANDLES;",
        "#define MPI_T_ERR_NOT_INITIALIZED 60",
        "#define MPI_T_ERR_INVALID_INDEX 62",
        "#define MPI_T_ERR_INVALID_HANDLE 64",
        "#define MPI_T_ERR_INVALID_SESSION 67",
        "#define MPI_T_ERR_PVAR_NO_STARTSTOP 70",
        "#define MPI_T_ERR_PVAR_NO_WRITE 71",
        "#define MPI_T_ERR_INVALID_NAME 73",
        "#define MPI_T_ERR_INVALID 74",
        "#define MPI_T_VERBOSITY_USER_BASIC 221",
        "#define MPI_T_BIND_NO_OBJECT 9700",
        "#define MPI_T_PVAR_CLASS_COUNTER 246",
        "extern int * const MPI_UNWEIGHTED;",
        "extern int * const MPI_WEIGHTS_EMPTY;",
        "#define MPI_LONG_LONG MPI_LONG_LONG_INT",
        "#define MPI_C_COMPLEX MPI_C_FLOAT_COMPLEX",
        "#define MPI_COMM_NULL_COPY_FN ((MPI_Comm_copy_attr_function *)0)",
        "#define MPI_COMM_NULL_DELETE_FN ((MPI_Comm_delete_attr_function *)0)",
        "#define MPI_COMM_DUP_FN ((MPI_Comm_copy_attr_function *)MPIR_Dup_fn)",
        "int MPIR_Dup_fn(MPI_Comm, int, void *, void *, void *, int *);",
        "#define MPI_TYPE_NULL_COPY_FN ((MPI_Type_copy_attr_function *)0)",
        "#define MPI_TYPE_NULL_DELETE_FN ((MPI_Type_delete_attr_function *)0)",
        "#define MPI_TYPE_DUP_FN ((MPI_Type_copy_attr_function *)MPIR_Dup_fn)",
        "#define MPI_WIN_NULL_COPY_FN ((MPI_Win_copy_attr_function *)0)",
        "#define MPI_WIN_NULL_DELETE_FN ((MPI_Win_delete_attr_function *)0)",
        "#define MPI_WIN_DUP_FN ((MPI_Win_copy_attr_function *)MPIR_Dup_fn)",
        "",
    ]
    lines += constants()
    lines += ["", "/* What tandem implements (each also as PMPI_). */"]
    lines += protos
    lines += ["", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    return names, "\n".join(lines)


README = ROOT / "README.md"
BEGIN, END = "<!-- mpi-functions: scripts/mpi-header.py -->", "<!-- /mpi-functions -->"


def table(names):
    rows = ["| | | | |", "|---|---|---|---|"]
    for i in range(0, len(names), 4):
        r = [f"`{n}`" for n in names[i:i + 4]] + [""] * (4 - len(names[i:i + 4]))
        rows.append("| " + " | ".join(r) + " |")
    return "\n".join(rows)


def readme_with(names):
    text = README.read_text()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:a] + "\n" + table(names) + "\n" + text[b:]


def main():
    names, text = header()
    if "--check" in sys.argv:
        if not HEADER.exists() or HEADER.read_text() != text:
            sys.exit("mpi/include/mpi.h is stale: run scripts/mpi-header.py")
        if README.read_text() != readme_with(names):
            sys.exit("README's table of MPI functions is stale: run scripts/mpi-header.py")
        print(f"mpi.h and README's table match the library ({len(names)} functions)")
        return
    README.write_text(readme_with(names))
    HEADER.parent.mkdir(parents=True, exist_ok=True)
    HEADER.write_text(text)
    print(f"wrote {HEADER} ({len(names)} functions)")


if __name__ == "__main__":
    main()
