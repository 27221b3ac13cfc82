"""`python -m harness`: the same commands as the `harness` console script."""

from harness.cli import main

if __name__ == "__main__":
    main()
