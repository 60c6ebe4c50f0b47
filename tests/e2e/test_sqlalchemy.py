"""End-to-end: a SQLAlchemy ORM session on a raftsql replica (issue #24
item 6). The only change to the application is loading raftsql, in a
"connect" event listener of the engine.

metadata.create_all creates the declarative models' tables and indexes;
the session adds and commits, rolls back, updates and deletes. SQLAlchemy
runs its own transactions (pysqlite's implicit BEGIN before writes), so
the schema statements of create_all meet the write path in and out of
transactions. Every node ends with the same schema and rows,
raft_verify() passes on each, and none diverged or repaired.

It runs in three placements (orm_cluster.py), each on a cluster of its
own: in the process of the node it writes on, that node leading
(SqlAlchemyOnLeaderTest) or following (SqlAlchemyOnFollowerTest), and in
a process that runs no node, on a follower's file
(SqlAlchemyFromOtherProcessTest: its writes go through that node's
socket).
"""

import unittest

from sqlalchemy import (Column, ForeignKey, Integer, String, create_engine,
                        event, func, select)
from sqlalchemy.orm import Session, declarative_base, relationship

from orm_cluster import (FollowerCase, LeaderCase, OtherProcessCase,
                         load_raftsql)

Base = declarative_base()


class Author(Base):
    __tablename__ = "author"
    id = Column(Integer, primary_key=True)
    name = Column(String(50), nullable=False, unique=True)
    books = relationship("Book", back_populates="author",
                         cascade="all, delete-orphan")


class Book(Base):
    __tablename__ = "book"
    id = Column(Integer, primary_key=True)
    title = Column(String(100), nullable=False, index=True)
    author_id = Column(Integer, ForeignKey("author.id"), nullable=False)
    copies = Column(Integer, nullable=False, default=1)
    author = relationship("Author", back_populates="books")


class SqlAlchemyWorkload:
    """The application; mixed into each placement's test case."""

    def make_engine(self, transactional_ddl):
        """The application's engine: raftsql loaded on each connection.
        With @transactional_ddl, SQLAlchemy's documented pysqlite recipe
        for transactional DDL and SAVEPOINT: the driver's own BEGIN
        handling off, SQLAlchemy's "begin" event emits BEGIN, so
        create_all runs inside one transaction."""
        self.engine = create_engine("sqlite:///" + self.db,
                                    connect_args={"timeout": 10})
        self.addCleanup(self.engine.dispose)

        @event.listens_for(self.engine, "connect")
        def on_connect(dbapi_connection, connection_record):
            load_raftsql(dbapi_connection)
            if transactional_ddl:
                dbapi_connection.isolation_level = None

        if transactional_ddl:
            @event.listens_for(self.engine, "begin")
            def on_begin(conn):
                conn.exec_driver_sql("BEGIN")

    def test_session(self):
        """pysqlite's default: create_all in autocommit statements."""
        self.make_engine(False)
        self.session_workload()

    def test_session_transactional_ddl(self):
        """The transactional DDL recipe: create_all inside BEGIN...COMMIT,
        and a nested transaction (SAVEPOINT) rolled back."""
        self.make_engine(True)
        self.session_workload()

    def session_workload(self):
        Base.metadata.create_all(self.engine)

        with Session(self.engine) as s:
            tolkien = Author(name="Tolkien")
            tolkien.books = [Book(title="The Hobbit", copies=3),
                             Book(title="The Silmarillion")]
            s.add(tolkien)
            s.add(Author(name="Le Guin",
                         books=[Book(title="A Wizard of Earthsea")]))
            s.commit()

        # A rollback: nothing of it anywhere.
        with Session(self.engine) as s:
            s.add(Author(name="Nobody"))
            s.flush()
            s.rollback()
            self.assertEqual(s.scalar(select(func.count(Author.id))), 2)

        # A failed commit (a unique name) rolls back; the session goes on.
        with Session(self.engine) as s:
            s.add(Author(name="Tolkien"))
            with self.assertRaises(Exception):
                s.commit()
            s.rollback()

        # A nested transaction (SAVEPOINT) rolled back, its outer one
        # committed.
        with Session(self.engine) as s:
            s.add(Author(name="Outer"))
            nested = s.begin_nested()
            s.add(Author(name="Inner"))
            s.flush()
            nested.rollback()
            s.commit()
        with Session(self.engine) as s:
            outer = s.execute(select(Author).where(
                Author.name == "Outer")).scalar_one()
            s.delete(outer)
            s.commit()

        # Updates and a delete with its cascade.
        with Session(self.engine) as s:
            hobbit = s.execute(select(Book).where(
                Book.title == "The Hobbit")).scalar_one()
            hobbit.copies += 1
            le_guin = s.execute(select(Author).where(
                Author.name == "Le Guin")).scalar_one()
            le_guin.name = "Ursula K. Le Guin"
            s.commit()
            silm = s.execute(select(Book).where(
                Book.title == "The Silmarillion")).scalar_one()
            s.delete(silm)
            s.commit()
            self.assertEqual(s.scalar(select(Book.copies).where(
                Book.title == "The Hobbit")), 4)

        # A table created and dropped at run time, inside a transaction.
        with self.engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE scratch(x)")
            conn.exec_driver_sql("INSERT INTO scratch VALUES (1), (2)")
            conn.exec_driver_sql("DROP TABLE scratch")
            conn.exec_driver_sql("CREATE INDEX book_copies ON book(copies)")

        self.assert_replicas_equal({"author": 2, "book": 2})


class SqlAlchemyOnLeaderTest(SqlAlchemyWorkload, LeaderCase):
    pass


class SqlAlchemyOnFollowerTest(SqlAlchemyWorkload, FollowerCase):
    pass


class SqlAlchemyFromOtherProcessTest(SqlAlchemyWorkload, OtherProcessCase):
    pass


if __name__ == "__main__":
    unittest.main()
