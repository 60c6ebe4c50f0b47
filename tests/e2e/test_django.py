"""End-to-end: Django on a raftsql replica (issue #24 item 6). The only
change to Django is loading raftsql, in a connection_created handler.

Django's migrate of its contrib apps (auth, contenttypes, sessions, admin)
runs each migration's schema statements inside BEGIN...COMMIT (its schema
editor is atomic; a table remake is CREATE TABLE new__x, INSERT INTO
new__x SELECT, DROP TABLE x, ALTER TABLE new__x RENAME TO x, with
foreign keys turned off outside the transaction and PRAGMA
foreign_key_check inside). Then ORM writes: users created, updated,
deleted, a transaction.atomic block, and one that raises (rolled back).
Every node ends with the same schema and rows, raft_verify() passes on
each, and none diverged or repaired.

It runs in three placements (orm_cluster.py), each on a cluster of its
own: in the process of the node it writes on, that node leading
(DjangoOnLeaderTest) or following (DjangoOnFollowerTest), and in a
process that runs no node, on a follower's file
(DjangoFromOtherProcessTest: its writes go through that node's socket).

Before, migrate stopped at its first migration: the capture refused a
schema statement inside a transaction, and the COMMIT was vetoed
(IntegrityError, "constraint failed"); and Django ran only on the
leader's node, in its own process.
"""

import unittest

import django
import django.conf

from orm_cluster import (FollowerCase, LeaderCase, OtherProcessCase,
                         load_raftsql)

APPS = ["django.contrib.contenttypes", "django.contrib.auth",
        "django.contrib.sessions", "django.contrib.admin",
        "django.contrib.messages"]


def on_connection_created(sender, connection, **kwargs):
    """Django's connection_created signal: load raftsql into each new
    sqlite connection (the application's only change)."""
    if connection.vendor == "sqlite":
        load_raftsql(connection.connection)


def use_database(path):
    """Point Django's default database at @path: the settings once per
    process (Django reads them once), then, as Django's own test runner
    does for its test databases, the name for each test."""
    settings = django.conf.settings
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": path,
                "OPTIONS": {"timeout": 10},
            }},
            INSTALLED_APPS=APPS,
            USE_TZ=True,
            SECRET_KEY="raftsql-e2e",
            DEFAULT_AUTO_FIELD="django.db.models.AutoField",
            PASSWORD_HASHERS=[
                "django.contrib.auth.hashers.MD5PasswordHasher"],
        )
        from django.db.backends.signals import connection_created
        connection_created.connect(on_connection_created,
                                   dispatch_uid="raftsql")
        django.setup()
    from django.contrib.contenttypes.models import ContentType
    from django.db import connections
    connections.close_all()
    settings.DATABASES["default"]["NAME"] = path
    connections["default"].settings_dict["NAME"] = path
    ContentType.objects.clear_cache()


class DjangoWorkload:
    """The application; mixed into each placement's test case."""

    def setUp(self):
        super().setUp()
        use_database(self.db)

    def tearDown(self):
        from django.db import connections
        connections.close_all()
        super().tearDown()

    def test_migrate_and_orm_writes(self):
        """migrate, then ORM writes; every replica the same."""
        from django.contrib.auth.models import Group, Permission, User
        from django.contrib.contenttypes.models import ContentType
        from django.core.management import call_command
        from django.db import transaction

        call_command("migrate", interactive=False, verbosity=0)
        # Every migration of the contrib apps is recorded.
        from django.db.migrations.recorder import MigrationRecorder
        applied = MigrationRecorder.Migration.objects.count()
        self.assertGreaterEqual(applied, 15)

        alice = User.objects.create_user("alice", "a@example.com", "pw-a")
        User.objects.create_user("bob", "b@example.com", "pw-b")
        User.objects.create_superuser("root", "r@example.com", "pw-r")
        alice.first_name = "Alice"
        alice.save()
        User.objects.filter(username="bob").update(email="bob@example.org")
        with transaction.atomic():
            g = Group.objects.create(name="editors")
            g.permissions.set(Permission.objects.filter(
                codename__startswith="change_"))
            for u in User.objects.filter(is_superuser=False):
                u.groups.add(g)
        User.objects.create_user("carol", "c@example.com", "pw-c")
        User.objects.filter(username="carol").delete()

        class Abort(Exception):
            pass

        with self.assertRaises(Abort):
            with transaction.atomic():
                User.objects.create_user("dave", "d@example.com", "pw-d")
                raise Abort()
        self.assertFalse(User.objects.filter(username="dave").exists())
        self.assertEqual(User.objects.get(username="alice").first_name,
                         "Alice")

        self.assert_replicas_equal({
            "auth_user": 3,
            "auth_group": 1,
            "auth_user_groups": 2,
            "django_migrations": applied,
            "django_content_type": ContentType.objects.count(),
            "auth_permission": Permission.objects.count(),
        })


class DjangoOnLeaderTest(DjangoWorkload, LeaderCase):
    pass


class DjangoOnFollowerTest(DjangoWorkload, FollowerCase):
    pass


class DjangoFromOtherProcessTest(DjangoWorkload, OtherProcessCase):
    pass


if __name__ == "__main__":
    unittest.main()
