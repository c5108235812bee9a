"""The demos (scripts/demo.sh): the shared listener (``listener``), each robot's demo (``tabletop``, ``aloha``) and
the command that picks one (``cli``)."""
