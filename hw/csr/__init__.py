"""The node's AXI4-Lite control/status register block (``mcf.spec.regmap`` made hardware)."""
from .ports import EthControlPort, RegisterBusSignature, RouteTablePort
from .registers import ControlRegisters

__all__ = ["ControlRegisters", "EthControlPort", "RegisterBusSignature", "RouteTablePort"]
