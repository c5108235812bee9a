"""oxygen-serve: the runtime and engine behind openpi's websocket policy protocol, one robot per connection.

No ROS here: ``codec`` (openpi's msgpack numpy encoding), ``layouts`` (each openpi client's observation keys),
``scheduler`` (connections batched through one engine tick), ``server`` (the websocket protocol), ``cli``.
"""
