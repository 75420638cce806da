"""nsqd's options: flags in Go syntax, the TOML config file, and the runtime-changeable settings of
``/config``. A leaf: it imports nothing else of nsqd."""
