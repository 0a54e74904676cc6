class UniqueViolation(Exception): pass
class ForeignKeyViolation(Exception): pass
