# Stand-in for the get-pip bootstrap that ansible-test downloads from the internet, which is
# unreachable here. ansible-test calls it as "[pip options] pip==X [--no-setuptools] [--no-wheel]".
# Bootstrap pip from the standard library in a subprocess (ensurepip clears PIP_CONFIG_FILE in its
# own process), then install what was asked from the configured package index.
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
wanted = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + wanted))
