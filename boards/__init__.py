"""KR260 board support: platform, Vivado block design and build flow."""
