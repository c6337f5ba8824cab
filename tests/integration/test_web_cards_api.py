"""san-web's card API in process (httpx over ASGI), JobService faked in memory
(san_jobs.client.testing.FakeJobService): GET /api/scraps (pages, owners),
GET /api/scraps/{id} (its card) and GET /api/scraps/{id}/related. Cards get into
san-web's table as the inbox will put them: the change feed's handler, called in a
transaction with the completed job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.web_in_process import Web, web_app


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[Web]:
    async for made in web_app(tmp_path, "off"):
        yield made


@pytest.fixture
async def web_login(tmp_path: Path) -> AsyncIterator[Web]:
    async for made in web_app(tmp_path, "password"):
        yield made


async def test_a_scraps_card_comes_from_san_webs_table_and_outlives_the_job(web: Web) -> None:
    async with web.login("") as http:
        scrap_id = await web.save(http, "Queues")
        assert (await http.get(f"/api/scraps/{scrap_id}")).json()["card"] is None
        job_id = await web.complete(http, scrap_id, [1.0, 0.0], summary="Queues hold jobs.")
        web.service._jobs.clear()  # JobService pruned the job
        body = (await http.get(f"/api/scraps/{scrap_id}")).json()
    assert body["card"] == {
        "summary": "Queues hold jobs.",
        "tags": ["t"],
        "model": "m",
        "jobId": job_id,
        "createdAt": body["card"]["createdAt"],
    }
    assert body["card"]["createdAt"].endswith("+00:00")
    assert body["state"] == "delivered" and body["jobId"] == job_id  # as before


async def test_the_list_is_newest_first_in_pages(web: Web) -> None:
    async with web.login("") as http:
        made = [await web.save(http, f"scrap {n}") for n in range(5)]
        await web.complete(http, made[3], [1.0, 0.0], summary="Card of 3.")
        seen: list[str] = []
        pages = 0
        token = ""
        while True:
            answer = await http.get("/api/scraps", params={"pageSize": 2, "pageToken": token})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert len(body["scraps"]) <= 2
            seen += [item["scrapId"] for item in body["scraps"]]
            pages += 1
            token = body["nextPageToken"]
            if not token:
                break
        first = (await http.get("/api/scraps")).json()["scraps"]
    assert seen == made[::-1] and pages == 3
    by_id = {item["scrapId"]: item for item in first}
    assert by_id[made[3]]["card"]["summary"] == "Card of 3."
    assert by_id[made[2]]["card"] is None
    assert by_id[made[2]]["state"] == "delivered" and by_id[made[2]]["jobId"]
    assert by_id[made[2]]["title"] == "scrap 2" and by_id[made[2]]["excerpt"] == "Some text."


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"pageSize": "0"}, "pageSize"),
        ({"pageSize": "101"}, "pageSize"),
        ({"pageSize": "ten"}, "pageSize"),
        ({"pageToken": "not-a-token"}, "pageToken"),
        ({"pageToken": "MTIzOnh5eg"}, "pageToken"),  # "123:xyz": not a scrap id
    ],
)
async def test_a_bad_page_size_or_token_is_400_naming_it(
    web: Web, params: dict[str, str], named: str
) -> None:
    async with web.login("") as http:
        answer = await http.get("/api/scraps", params=params)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert [v["field"] for v in error["fieldViolations"]] == [named]


async def test_each_user_lists_and_relates_only_their_own_scraps(web_login: Web) -> None:
    async with web_login.login("ann") as ann, web_login.login("bob") as bob:
        ann_first = await web_login.save(ann, "ann 1")
        ann_second = await web_login.save(ann, "ann 2")
        bob_one = await web_login.save(bob, "bob 1")
        await web_login.complete(ann, ann_first, [1.0, 0.0, 0.0])
        await web_login.complete(ann, ann_second, [0.9, 0.1, 0.0])
        await web_login.complete(bob, bob_one, [1.0, 0.0, 0.0])  # closest to ann 1 of all
        ann_list = (await ann.get("/api/scraps")).json()["scraps"]
        bob_list = (await bob.get("/api/scraps")).json()["scraps"]
        ann_related = (await ann.get(f"/api/scraps/{ann_first}/related")).json()["related"]
        not_hers = await ann.get(f"/api/scraps/{bob_one}/related")
        not_hers_either = await ann.get(f"/api/scraps/{bob_one}")
    assert [item["title"] for item in ann_list] == ["ann 2", "ann 1"]
    assert [item["title"] for item in bob_list] == ["bob 1"]
    assert [item["scrapId"] for item in ann_related] == [ann_second]
    assert not_hers.status_code == 404 and not_hers_either.status_code == 404


async def test_a_similar_pair_ranks_first_in_each_others_related(web: Web) -> None:
    vectors = {
        "jobs a": [0.9, 0.1, 0.0, 0.1],
        "jobs b": [0.85, 0.15, 0.05, 0.1],
        "cooking": [0.0, 0.1, 1.0, 0.0],
        "gardens": [0.1, 1.0, 0.1, 0.0],
        "mixed": [0.5, 0.5, 0.5, 0.5],
    }
    async with web.login("") as http:
        ids = {}
        for title, vector in vectors.items():
            ids[title] = await web.save(http, title)
            await web.complete(http, ids[title], vector)
        a = (await http.get(f"/api/scraps/{ids['jobs a']}/related")).json()
        b = (await http.get(f"/api/scraps/{ids['jobs b']}/related")).json()
        none_yet = await web.save(http, "no card yet")
        empty = (await http.get(f"/api/scraps/{none_yet}/related")).json()
        missing = await http.get("/api/scraps/00000000-0000-0000-0000-000000000000/related")
    assert a["related"][0]["scrapId"] == ids["jobs b"]
    assert b["related"][0]["scrapId"] == ids["jobs a"]
    assert a["related"][0]["title"] == "jobs b"
    assert a["related"][0]["score"] > 0.99
    scores = [item["score"] for item in a["related"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 4
    assert ids["jobs a"] not in [item["scrapId"] for item in a["related"]]
    assert empty["related"] == []
    assert missing.status_code == 404
