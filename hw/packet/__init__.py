"""Packet framing: header serializer/deserializer and the packetizer."""
