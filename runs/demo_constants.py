"""Constants shared by the demo seed (`seed_demo`) and the login page's demo hint."""

# The password every demo persona gets. It is printed on the login page only while demo runs
# exist (Run.is_demo), so a real deployment never advertises it.
DEMO_PASSWORD = "airboard-demo"  # noqa: S105 - a public demo credential, by design

# The persona the login page suggests.
DEMO_USERNAME = "alice"
