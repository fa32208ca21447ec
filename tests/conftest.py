import sys
from pathlib import Path

# make `import shelf` work for the repo-wide tests
sys.path.insert(0, str(Path(__file__).resolve().parent))
