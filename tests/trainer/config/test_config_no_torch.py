"""trainer.config (and the validate/schema CLI path) must import without torch, transformers or ray."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers', 'ray'):
            raise ImportError('blocked import of ' + name)
        return None
sys.meta_path.insert(0, Block())
import trainer.config
from trainer.config import validate_config, config_json_schema, config_to_yaml
from trainer.cli import main
from trainer.config.export import config_markdown
from pathlib import Path
result = validate_config(Path('examples/grpo_gpu.yaml'))
assert result.config is not None and all('is not built' in i.message for i in result.errors), result.errors
config_json_schema(); config_markdown(); config_to_yaml(result.config)
rc = main(['validate', 'examples/ppo_gpu.yaml'])
assert rc in (0, 2)
rc = main(['validate', 'examples/demo_grpo_cpu.yaml'])
assert rc == 0
assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'ray')]
print('ok')
"""


def test_config_imports_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCKER], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")
