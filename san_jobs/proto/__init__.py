"""Generated from proto/ by scripts/gen_proto.py (make proto): do not edit."""
