"""Registers the model ElsewhereAgent uses: imported only through --import / LG_IMPORTS."""

from lg_core.providers import scripted

scripted.register("cli-elsewhere", [{"text": "Registered by cli_models."}])
