.PHONY: test install up down demo

install:
	scripts/bootstrap.sh

test:
	scripts/test.sh

up: install
	.venv/bin/lb up

down:
	.venv/bin/lb down

demo: install
	.venv/bin/lb demo
