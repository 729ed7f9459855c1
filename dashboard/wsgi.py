import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
application = get_wsgi_application()
# The URLconf, and with it every view and API module of both apps, imported now as the worker
# boots rather than inside the first request it serves: ~0.7 s of a cold process's CPU (more
# where no bytecode is cached) that a node agent's first push after a deploy waited behind.
get_resolver().url_patterns  # noqa: B018
