"""Registers the torch.distributed backend "hcomm" without loading it, and
says which torch releases hcomm supports (the one place that does: setup.py
checks it at build time and passes it to the C++ code, which checks it
again; hcomm.torch checks it at import).

Supported: torch 2.11 to 2.15, the newest release on PyPI and the four
minor releases before it. torch 1.x is not supported (docs/python.md).

torch calls register() through the entry points of pyproject.toml: group
"torch.backends" at `import torch` (torch 2.5 and later; off with
TORCH_DEVICE_BACKEND_AUTOLOAD=0), group "torch.distributed.backends" when
init_process_group names a backend it does not know (torch 2.15). This
module stands outside the package hcomm so that loading it loads nothing
else: the package and its C++ backend (hcomm.torch) are imported when the
first hcomm group is made. register() never raises (an exception would
fail `import torch`): a torch out of the range gets a warning and no
backend.
"""
import warnings

MIN = (2, 11)
MAX = (2, 15)


def parse(version):
    """(major, minor) of a torch version string ("2.15.0+cu132" -> (2, 15))."""
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)


def check(version, what="torch"):
    """None when version is in the range, else the message saying why not."""
    try:
        v = parse(version)
    except (ValueError, IndexError):
        return f"{what} {version}: not a version hcomm understands"
    if MIN <= v <= MAX:
        return None
    return (f"{what} {version} is not supported by hcomm's backend, which supports torch "
            f"{MIN[0]}.{MIN[1]} to {MAX[0]}.{MAX[1]} (pip install 'torch>={MIN[0]}.{MIN[1]},"
            f"<{MAX[0]}.{MAX[1] + 1}')")


BACKEND = "hcomm"
DEVICES = ["cpu", "cuda"]


def _create(dist_opts, options):
    import hcomm.torch as hcomm_torch  # loads the C++ backend (and checks it)

    return hcomm_torch._create(dist_opts, options)


def register(creator=None):
    """Registers "hcomm" with torch.distributed (once); creator: the function
    torch calls to make a group (extended API), default one that loads the
    backend then. Returns True when "hcomm" is registered."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001  no torch, or a broken one: nothing to do
        warnings.warn(f"hcomm: torch.distributed does not import ({e!r}): backend not registered")
        return False
    if not dist.is_available():
        return False
    why = check(torch.__version__)
    if why:
        warnings.warn(f"hcomm: {why}: the backend \"hcomm\" is not registered")
        return False
    try:
        plugin = dist.Backend._plugins.get(BACKEND.upper())
        if plugin is None or (creator is not None and plugin.creator_fn is not creator):
            dist.Backend.register_backend(BACKEND, creator or _create, extended_api=True, devices=DEVICES)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"hcomm: registering the torch backend failed: {e!r}")
        return False
    return True
