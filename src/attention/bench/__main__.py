"""``python -m attention.bench``: run the benchmark (see ``--help``)."""

try:
    from .cli import main
except ModuleNotFoundError as error:  # installed without the harness's extra
    raise SystemExit(
        f"python -m attention.bench needs {error.name!r}, which the package's benchmark extra installs: "
        "pip install 'attention[bench]' (from a clone: pip install '.[bench]')"
    ) from None

main()
