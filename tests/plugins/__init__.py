"""Importable test plug-ins: models named by dotted path in configs (`_target_`)."""
