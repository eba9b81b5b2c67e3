#!/usr/bin/env python3
"""Oracle for chat templates: renders one with jinja2 the way Hugging Face transformers'
apply_chat_template does (sandboxed environment, trim_blocks and lstrip_blocks on, a
raise_exception global; messages, add_generation_prompt and extra keyword arguments such as
enable_thinking in the context, plus the special-token strings).

Reads {"template", "bos_token", "eos_token", "cases": [{"messages", "add_generation_prompt",
"enable_thinking"}, ...]} as JSON on stdin and writes the rendered texts, one per case, as a JSON
list of strings to stdout. Needs `pip install jinja2`.
"""

import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def main() -> None:
    request = json.load(sys.stdin)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(request["template"])
    rendered = [
        template.render(
            messages=case["messages"],
            add_generation_prompt=case["add_generation_prompt"],
            enable_thinking=case["enable_thinking"],
            bos_token=request["bos_token"],
            eos_token=request["eos_token"],
        )
        for case in request["cases"]
    ]
    json.dump(rendered, sys.stdout)


if __name__ == "__main__":
    main()
