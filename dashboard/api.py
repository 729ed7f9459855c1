from ninja import NinjaAPI

api = NinjaAPI(title="Airboard API", version="1")
