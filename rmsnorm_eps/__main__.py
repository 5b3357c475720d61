"""``python -m rmsnorm_eps`` runs the command-line tool."""

from rmsnorm_eps.cli import main

if __name__ == "__main__":
    main()
