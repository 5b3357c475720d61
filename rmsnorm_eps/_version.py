"""The package version, in a leaf module every other module may import (the package root
imports the API lazily, so importing the root from below would close an import cycle)."""

__version__ = "0.1.0"
