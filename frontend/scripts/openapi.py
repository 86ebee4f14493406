"""Write the server's OpenAPI document as the dashboard's types are generated from it.

    python frontend/scripts/openapi.py frontend/openapi.json

A simulated fleet, default settings, a throw-away data folder: the document
does not depend on the machine it is made on. ``scripts/gen-api.sh`` runs it,
and ``tests/api/test_frontend_schema.py`` checks the committed file against it.
"""

import json
import os
import sys
import tempfile

with tempfile.TemporaryDirectory() as data_dir:
    os.environ["GPUFLEET_DATA_DIR"] = data_dir
    from gpufleet.api.app import create_app
    from gpufleet.config import load_settings

    app = create_app(load_settings(simulate="4xH100-80GB"))
    with open(sys.argv[1], "w") as fh:
        json.dump(app.openapi(), fh, indent=1, sort_keys=True)
        fh.write("\n")
