"""The driver contract, written once in include/sova/driver.hpp, against both drivers.

Usage: check_driver_overrides.py SOURCE_ROOT

Parses class Driver (include/sova/driver.hpp), SimDriver (include/sova/sim.hpp)
and CudaDriver (lib/driver/cuda/cuda_driver.hpp). Fails, naming each, unless
  * every pure virtual of Driver is overridden by both drivers;
  * every `override` in a driver names a virtual of Driver, with its parameter
    types and const-ness (parameter names may differ);
  * no driver declares a function of a Driver virtual's name without
    `override` (an overload that hides the contract's).
  * SimDriver overrides every virtual (a default would call other methods, and
    the simulation's count of calls by kind would name those instead);
  * enum class SimCall (include/sova/sim.hpp) has one value per Driver virtual
    but name(), in the contract's order, and sim_call_name's table
    (lib/driver/sim/sim_driver.cpp) the same names in the same order: the
    driver-call budget (docs/design.md, "Driver calls per pair") counts by them.
Virtuals with a default implementation may be left to it by CudaDriver; the
ones it leaves are listed. The compiler catches much of this for the classes it
builds; this also covers the driver a build leaves out and says it in the
contract's own terms.
"""
import pathlib
import re
import sys

TYPE_WORDS = {"int", "long", "short", "char", "unsigned", "signed", "bool", "float", "double", "void", "const"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def class_body(text, name):
    m = re.search(r"\bclass\s+(?:SOVA_API\s+)?" + name + r"\b[^{;]*\{", text)
    if not m:
        sys.exit(f"class {name} not found")
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def declarations(body):
    """The class's member declarations, one string each (inline bodies dropped)."""
    out, cur, depth = [], [], 0
    for ch in body:
        if depth == 0 and ch == "{":
            depth = 1
            out.append("".join(cur))
            cur = []
        elif depth:
            depth += {"{": 1, "}": -1}.get(ch, 0)
        elif ch == ";":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    decls = []
    for d in out:
        d = re.sub(r"\b(public|private|protected)\s*:", " ", d)
        d = " ".join(d.split())
        if "(" in d:
            decls.append(d)
    return decls


def param_type(param):
    param = param.split("=")[0].strip()
    tokens = re.findall(r"[A-Za-z_][A-Za-z_0-9:]*|[*&]+|\S", param)
    if len(tokens) > 1 and re.fullmatch(r"[A-Za-z_]\w*", tokens[-1]) and tokens[-1] not in TYPE_WORDS:
        tokens = tokens[:-1]  # the parameter's name
    return " ".join(tokens).replace(" *", "*").replace(" &", "&")


def parse(decl):
    """(name, signature, flags) of a member function declaration, or None."""
    m = re.match(r"(.*?)\b([A-Za-z_]\w*)\s*\((.*)\)(.*)$", decl)
    if not m or "~" in decl.split("(")[0]:
        return None  # not a function, or a destructor
    head, name, params, tail = m.groups()
    if name == "operator" or "operator" in head.split():
        return None
    params = [param_type(p) for p in params.split(",")] if params.strip() not in ("", "void") else []
    const = re.match(r"\s*const\b", tail) is not None
    flags = {
        "virtual": "virtual" in head.split(),
        "pure": re.search(r"=\s*0\s*$", tail) is not None,
        "override": re.search(r"\boverride\b", tail) is not None,
    }
    return name, (tuple(params), const), flags


def members(path, cls):
    found = {}
    for decl in declarations(class_body(strip_comments(path.read_text()), cls)):
        parsed = parse(decl)
        if parsed:
            name, sig, flags = parsed
            found.setdefault(name, []).append((sig, flags))
    return found


def show(name, sig):
    params, const = sig
    return f"{name}({', '.join(params)}){' const' if const else ''}"


def sim_call_errors(root, contract):
    """SimCall and sim_call_name against the contract's virtuals, in order."""
    order = []
    for decl in declarations(class_body(strip_comments((root / "include/sova/driver.hpp").read_text()), "Driver")):
        parsed = parse(decl)
        if parsed and parsed[2]["virtual"] and parsed[0] != "name" and parsed[0] not in order:
            order.append(parsed[0])
    sim_text = strip_comments((root / "include/sova/sim.hpp").read_text())
    m = re.search(r"enum\s+class\s+SimCall\b[^{]*\{([^}]*)\}", sim_text)
    if not m:
        return ["include/sova/sim.hpp: enum class SimCall not found"]
    values = [v.split("=")[0].strip() for v in m.group(1).split(",") if v.strip()]
    values = [v for v in values if v != "kinds"]
    errors = []
    if values != order:
        errors.append("include/sova/sim.hpp: SimCall is not Driver's virtuals in order: missing "
                      f"{[n for n in order if n not in values]}, extra {[v for v in values if v not in order]}"
                      f"{'' if sorted(values) != sorted(order) else ' (the order differs)'}")
    src = (root / "lib/driver/sim/sim_driver.cpp").read_text()
    t = re.search(r"kNames\[kSimCallKinds\]\s*=\s*\{([^}]*)\}", src)
    names = re.findall(r'"(\w+)"', t.group(1)) if t else None
    if names != values:
        errors.append("lib/driver/sim/sim_driver.cpp: sim_call_name's kNames is not SimCall's values in order")
    print(f"SimCall: {len(values)} kinds, sim_call_name: {len(names or [])} names")
    return errors


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1])
    contract = members(root / "include/sova/driver.hpp", "Driver")
    virtuals = {name: sig for name, decls in contract.items() for sig, flags in decls if flags["virtual"]}
    pure = {name for name, decls in contract.items() for _, flags in decls if flags["pure"]}
    if len(pure) < 20:
        sys.exit(f"only {len(pure)} pure virtuals parsed from driver.hpp: the parser is out of date")
    errors = []
    for path, cls in (("include/sova/sim.hpp", "SimDriver"), ("lib/driver/cuda/cuda_driver.hpp", "CudaDriver")):
        mine = members(root / path, cls)
        overridden = set()
        for name, decls in mine.items():
            for sig, flags in decls:
                if flags["override"]:
                    if name not in virtuals:
                        errors.append(f"{cls} ({path}): {show(name, sig)} is marked override; Driver has no such virtual")
                    elif sig != virtuals[name]:
                        errors.append(f"{cls} ({path}): {show(name, sig)} overrides Driver::{show(name, virtuals[name])}"
                                      " with other parameters")
                    else:
                        overridden.add(name)
                elif name in virtuals:
                    errors.append(f"{cls} ({path}): {show(name, sig)} has a Driver virtual's name and no override")
        for name in sorted(pure - overridden):
            errors.append(f"{cls} ({path}): does not override the pure virtual Driver::{show(name, virtuals[name])}")
        defaulted = sorted(set(virtuals) - pure - overridden)
        if cls == "SimDriver":
            for name in defaulted:
                errors.append(f"{cls} ({path}): leaves Driver::{show(name, virtuals[name])} to its default:"
                              " the simulation counts each method as itself (SimCall)")
        print(f"{cls}: {len(overridden)} of Driver's {len(virtuals)} virtuals overridden"
              f" ({len(pure)} pure); left to Driver's default: {', '.join(defaulted) or 'none'}")
    errors += sim_call_errors(root, contract)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
