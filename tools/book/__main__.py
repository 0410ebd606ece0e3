"""``python -m book``: the book's chores that run outside the build.

    python -m book notebooks    write every chapter's notebook into notebooks/ (what Colab opens)
    python -m book pdf SITE     print the built site's print page to a PDF and link it
    python -m book screenshot   the README's screenshot of a chapter page (--help: its options)
    python -m book fonts        the figures' font, subset, into docs/assets/fonts/
"""

import sys

from .constants import REPO


def main(argv: list[str]) -> None:
    """Run the command named by ``argv[0]``."""
    command, *rest = argv or ["--help"]
    if command == "notebooks":
        from .hooks.notebooks import repository_config, write_notebooks

        for path in write_notebooks(repository_config()):
            print(path.relative_to(REPO), file=sys.stderr)
    elif command == "pdf":
        from .pdf import main as pdf_main

        pdf_main(rest)
    elif command == "screenshot":
        from .screenshot import main as screenshot_main

        screenshot_main(rest)
    elif command == "fonts":
        from .fonts import write_fonts

        for path in write_fonts():
            print(path.relative_to(REPO), file=sys.stderr)
    elif command in ("-h", "--help"):
        print(__doc__)
    else:
        raise SystemExit(
            f"python -m book: expected the command notebooks, pdf, screenshot or fonts, got {command!r}\n"
            f"{__doc__}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
