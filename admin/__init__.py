"""The admin client and its command line (topics); talks to brokers through annal.v1 only."""
